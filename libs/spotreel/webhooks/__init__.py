"""What the gateway and the webhook notifier agree on about a webhook: which events a tenant may ask for
(`filters`), how a delivery is signed (`signing`) and where one may be sent (`targets`). The notifier
service itself is `spotreel.services.webhooks`."""
