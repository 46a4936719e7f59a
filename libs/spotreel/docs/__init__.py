"""The reference docs that are written from the code: `settings` writes docs/SETTINGS.md (`python -m
spotreel.docs.settings`). It reads the knobs of every process, so it sits above all of them (the top row of
the import layers)."""
