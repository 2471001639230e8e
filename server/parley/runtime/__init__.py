"""What the live pipeline feeds and measures: the result webhooks (one aiohttp client),
the Prometheus metrics, and the capacity measured from the streams served."""
