"""Runtime plumbing every service may import: `topics` (the topic catalogue, create-if-missing, the admin
client), `cql` (the Cassandra session), `s3` (the S3 client), `migrate` and `migrations/` (the keyspace's
versioned CQL), `seed` (the development tenant, key hashing), `consumers` (the Kafka consumer factory), `ports` (free and listening ports), `processes` (detached
processes by pid file and process group), `scrape_targets` (the local Prometheus's discovery directory) and
`errors`. The local launcher that starts
the servers themselves is `spotreel.devstack`, which nothing here imports."""
