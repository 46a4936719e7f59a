"""The public API's contract, shared by the gateway that serves it and the clients that speak it.

`submission` says what a POST /v1/videos body may hold and turns it into a SubmitJob (normalize, build_submit,
the patterns and ranges); `config` holds the gateway's knobs, among them the limits and defaults submission
applies (`GatewayConfig`, read from SPOTREEL_GATEWAY_*); `errors` is the one error shape of every answer
(`ApiError`). The gateway validates with them, and so does `spotreel.client.kafka`, which submits over Kafka
with the same ids and request hash; living here, below both, neither reaches into the other
(docs/DESIGN.md, section 6)."""
