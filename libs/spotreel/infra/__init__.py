"""Two packages in one folder. Runtime code every service may import: `topics` (the topic catalogue,
create-if-missing, the admin client), `cql` (the Cassandra session), `s3` (the S3 client), `migrate`
(the keyspace's migrations), `seed` (the dev tenant, key hashing) and `errors`. The local launcher, which
no runtime code imports (tools/import-walls.toml): `cli`, `stack`, `services`, `status`, `sizes`, `server`,
`kafka`, `cassandra`, `seaweed`, `monitoring`, `java`, `maven`, `render`, `loggist`, `layout`,
`processes`, `ports` and `templates/`."""
