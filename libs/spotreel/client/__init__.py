"""Clients of the deployment. `spotreel.client.http` is the public API's HTTP client, and `cli`, `commands`,
`schedules`, `output` and `watch` the `spotreel submit | status | watch | … | schedule` commands built on it
(moved out of the gateway, so the demo and the CLI import no service for them). `spotreel.client.kafka`
submits and controls jobs over Kafka, for internal producers that should not go through the public HTTP API,
with the gateway's own validation (spotreel.api: submission, config, errors)."""
