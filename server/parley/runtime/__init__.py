"""Live machinery: model worker threads, per-connection sessions, admission."""
