"""The local launcher: Kafka, Cassandra and SeaweedFS from their jars and binaries, the spotreel services as
processes, `spotreel infra up|down|status|fetch`. Development and test tooling only: no runtime code imports
it (tools/import-walls.toml). `cli` and `stack` (the stack as a whole), `services` (the spotreel processes),
`status` and `sizes` (what `infra status` prints), `server`, `processes`, `ports`, `layout`, `loggist` (what
every local server shares), `kafka`, `cassandra`, `seaweed`, `monitoring` (one module per server), `cluster`,
`kafka_cluster`, `cassandra_cluster` (the cluster profile, `infra up --nodes 3`: three brokers, three Cassandra
nodes), `java`, `maven`, `render` and `templates/` (JVMs, jars and config files)."""
