"""The simulated fleet: spot workers that talk to the real gateway (or Kafka) as a real worker does, without a
GPU, their configuration, lifetimes and figures. Shared by the fleet simulator (services/simulator,
`spotreel simulate`) and the capacity manager's simulated provider (services/capacity/provider_sim.py), so
it lives in the library rather than in either service.

- config.py   SimConfig and the parsers of its CLI flags
- fleet.py    SimWorker (one simulated worker), Shared (what the fleet shares), Fleet, Meter, submit_loop
- figures.py  attempts, accepted jobs, worker lives and the figures computed from them
- waste.py    the checkpoint interval and the expected waste of preemptions
"""
