"""The worker API (/internal/...): registration, the lease long-poll with its lease desk and idle-poll turns,
and the fenced lease commands answered by the scheduler's verdicts. Never imports the public API (an
import-linter contract); what both use is the gateway package's own modules (context, deps, metrics,
jsonbody, auth)."""
