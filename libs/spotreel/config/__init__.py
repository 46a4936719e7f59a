"""Configuration: `settings` (every process's SPOTREEL_* settings) and `knobs` (a service's tuning options
made settable from the environment). docs/SETTINGS.md lists both (`python -m spotreel.docs.settings`)."""
