"""The clouds' own preemption warnings, read from each cloud's instance metadata service.

`detect.py` decides which cloud this machine is on (SPOTREEL_CLOUD_NOTICES, or the DMI files when it is
`auto`); `aws.py`, `gcp.py` and `azure.py` each read one cloud's warning and parse it with pure functions;
`watcher.py` runs the chosen reader on a thread and turns a warning into `PreemptionNotice.trigger` (an
interruption, with the grace its deadline leaves) or `PreemptionNotice.advise` (AWS's rebalance
recommendation). worker/README.md, "Cloud preemption notices", says what the worker then does.
"""
