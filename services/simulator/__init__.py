"""The fleet simulator (`spotreel simulate`) and the SLO judge of a run (`spotreel slo`).

- cli.py         `spotreel simulate`: flags, then run.simulate
- run.py         one run: a private stack (or the shared one), the simulated fleet (spotreel.fleetsim), the
                 submission loop, and the figures of the run
- kafka_link.py  the fleet's Kafka transport: workers that claim assignments and produce fenced commands
- stack.py       the private stack a run starts (and reads back: events, CPU per process)
- slo.py         the seeds' SLOs judged from a run's events topic; slo_cli.py is `spotreel slo`
"""
