"""The public API's handlers and what only they need: /v1/videos, /v1/dags, /v1/schedules, /v1/usage, the SSE
stream and content redirect, admission (rate, in-flight, ETA), queue position and pending reasons from the
scheduler's pool stats, page tokens, request guards. Never imports the worker API (an import-linter contract)."""
