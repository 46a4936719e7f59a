"""Which job events a tenant may ask webhooks for (`webhook_events` on POST /v1/videos), and what a job that
names none gets. Shared by the gateway (validates the field, documents it in the OpenAPI description) and the
notifier (services/webhooks/payload.py sorts each event into one of these), so neither service imports the
other and the two cannot disagree on a name."""

from __future__ import annotations

# The kinds a job may ask for, and what it gets when it names none.
FILTERS = ("started", "progress", "completed", "failed")
DEFAULT_FILTER = frozenset({"completed", "failed"})
