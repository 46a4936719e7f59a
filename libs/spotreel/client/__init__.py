"""Clients for code inside the deployment: `spotreel.client.kafka` submits and controls jobs over Kafka
(for internal producers that should not go through the public HTTP API). The HTTP client of the CLI is
services/gateway/client.py."""
