"""Preemption economics: wasted GPU-seconds per job for three checkpoint policies at several MTBFs.

Policies: no checkpoint, a fixed 30 s interval, and the adaptive interval sqrt(2·C·MTBF) (the worker's
`optimal_interval_s` when it exists). Each is shown with the exact expectation (Daly's formula, see
spotreel.fleetsim.waste) beside a seeded Monte-Carlo over exponential preemptions, and the
best interval the formula allows (exhaustive over whole steps) is the reference.

    .venv/bin/python bench/economics.py                      # table as Markdown
    .venv/bin/python bench/economics.py --json out.json --jobs 20000 --notice-share 0.5
"""

from __future__ import annotations

import argparse
import json
import sys
import time

from spotreel.fleetsim.waste import (JobModel, adaptive_interval_s, expected_waste_s, interval_steps,
                                                  monte_carlo,
                                                  optimal_interval_by_formula)


def _mtbfs(text: str) -> list[float]:
    try:
        values = [float(x) for x in text.split(",") if x.strip()]
    except ValueError:
        raise argparse.ArgumentTypeError(f"--mtbf takes seconds separated by commas, got {text!r}") from None
    if not values or any(v <= 0 for v in values):
        raise argparse.ArgumentTypeError("--mtbf values must be positive seconds")
    return values


def rows(model: JobModel, mtbfs: list[float], *, fixed_s: float, lo: float, hi: float, jobs: int, seed: int,
         notice_share: float, price_per_gpu_hour: float) -> list[dict]:
    out = []
    for m in mtbfs:
        best_every, best_waste = optimal_interval_by_formula(model, m)
        policies = [("none", None), (f"fixed {fixed_s:g}s", fixed_s),
                    ("adaptive sqrt(2CM)", adaptive_interval_s(model.checkpoint_cost_s, m, lo, hi))]
        for i, (name, interval) in enumerate(policies):
            tally = monte_carlo(model, interval, m, jobs=jobs, seed=seed + i, notice_share=notice_share)
            mc = tally.mean_waste_s()
            out.append({
                "mtbf_s": m, "policy": name, "interval_s": interval,
                # checkpoints fall between steps: the interval the job actually gets
                "effective_interval_s": None if interval is None else interval_steps(model, interval) * model.step_s,
                "expected_waste_s": expected_waste_s(model, interval, m),
                "mc_waste_s": mc, "mc_ci95_s": tally.ci95_s(),
                "mc_lost_work_s": tally.lost_work_s / tally.jobs,
                "mc_checkpoint_s": tally.checkpoint_s / tally.jobs,
                "mc_restart_s": tally.restart_s / tally.jobs,
                "mc_preemptions": tally.preemptions / tally.jobs,
                "waste_cost_usd_per_1000_jobs": mc * 1000 / 3600 * price_per_gpu_hour,
                "optimum_interval_s": None if best_every is None else best_every * model.step_s,
                "optimum_waste_s": best_waste,
            })
    return out


def markdown(model: JobModel, table: list[dict], *, jobs: int, notice_share: float, price: float) -> str:
    head = (f"Job: {model.steps} steps x {model.step_s:g} s = {model.steps * model.step_s:g} s of work, checkpoint "
            f"C = {model.checkpoint_cost_s:g} s, restart R = {model.restart_s:g} s; {jobs} Monte-Carlo jobs per row, "
            f"share of preemptions with notice {notice_share:g}; price ${price:g}/GPU-hour.\n\n"
            "| MTBF | policy | interval s (asked -> at steps) | expected waste s/job | Monte-Carlo s/job (±95%) | lost / ckpt / restart s "
            "| preemptions/job | $ wasted per 1000 jobs | optimum (interval s: waste s) |\n"
            "|---|---|---|---|---|---|---|---|---|\n")
    lines = []
    for r in table:
        interval = "-" if r["interval_s"] is None else f"{r['interval_s']:.0f} -> {r['effective_interval_s']:.0f}"
        best = "never" if r["optimum_interval_s"] is None else f"{r['optimum_interval_s']:.0f}"
        lines.append(
            f"| {r['mtbf_s']:g} s | {r['policy']} | {interval} | {r['expected_waste_s']:.1f} | {r['mc_waste_s']:.1f} "
            f"± {r['mc_ci95_s']:.1f} | {r['mc_lost_work_s']:.1f} / {r['mc_checkpoint_s']:.1f} / "
            f"{r['mc_restart_s']:.1f} | {r['mc_preemptions']:.2f} | {r['waste_cost_usd_per_1000_jobs']:.2f} "
            f"| {best}: {r['optimum_waste_s']:.1f} |")
    return head + "\n".join(lines) + "\n"


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--steps", type=int, default=60)
    p.add_argument("--step-s", type=float, default=10.0, help="seconds per denoising step on the GPU")
    p.add_argument("--checkpoint-s", type=float, default=5.0, help="checkpoint cost C in seconds")
    p.add_argument("--restart-s", type=float, default=30.0, help="cold start + checkpoint load after a preemption")
    p.add_argument("--mtbf", type=_mtbfs, default=_mtbfs("300,900,1800,3600,14400"))
    p.add_argument("--fixed-s", type=float, default=30.0)
    p.add_argument("--lo", type=float, default=10.0, help="lower bound of the adaptive interval")
    p.add_argument("--hi", type=float, default=1800.0, help="upper bound of the adaptive interval")
    p.add_argument("--jobs", type=int, default=5000)
    p.add_argument("--seed", type=int, default=7)
    p.add_argument("--notice-share", type=float, default=0.0, help="share of preemptions that come with notice")
    p.add_argument("--price", type=float, default=2.50, help="USD per GPU-hour (a stated spot price)")
    p.add_argument("--json", dest="json_path", default=None)
    args = p.parse_args(argv)
    try:
        model = JobModel(args.steps * args.step_s, args.step_s, args.checkpoint_s, args.restart_s)
        t0 = time.perf_counter()
        table = rows(model, args.mtbf, fixed_s=args.fixed_s, lo=args.lo, hi=args.hi, jobs=args.jobs,
                     seed=args.seed, notice_share=args.notice_share, price_per_gpu_hour=args.price)
    except ValueError as exc:
        print(f"economics: {exc}", file=sys.stderr)
        return 2
    print(markdown(model, table, jobs=args.jobs, notice_share=args.notice_share, price=args.price))
    print(f"({time.perf_counter() - t0:.1f} s)")
    if args.json_path:
        with open(args.json_path, "w") as f:
            json.dump({"model": vars(args) | {"mtbf": args.mtbf}, "rows": table}, f, indent=2)
    return 0


if __name__ == "__main__":
    sys.exit(main())
