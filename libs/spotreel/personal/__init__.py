"""Personal data of a job, encrypted so it can be erased from a log that is kept forever (crypto-shredding).

The prompt, negative prompt and callback URL (`fields.PERSONAL`) travel in commands, events, table state
and read models as *envelopes*: AES-256-GCM ciphertext under a data key of the job's own (`envelope.py`).
Data keys live outside the log, wrapped by the operator's key-encryption key (`kek.py`), in a Cassandra
keystore (`keystore.py`); deleting a job's data key makes every copy of its envelopes, in every replica and
backup of the topic, unreadable. `vault.py` is what the services hold: seal at the gateway, open where the
plain text is needed (the job's views, the worker's lease, the webhook sender), erase.
docs/decisions/0035-crypto-shredding.md says why it is built this way.
"""
