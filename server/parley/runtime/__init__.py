"""Live machinery: the model worker threads, the sessions they serve, the measured
capacity, and the webhooks and metrics the sessions feed."""
