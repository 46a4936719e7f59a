"""What a long-running process sets up for itself at start: `eventloop` (the gateway's asyncio loop),
`gctune` (the cyclic garbage collector) and `tracing` (OpenTelemetry spans across the hops)."""
