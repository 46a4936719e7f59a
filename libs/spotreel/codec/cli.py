"""`spotreel schemas check|release`: guard and record schema evolution."""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from spotreel.codec.compat import check_schemas
from spotreel.codec.registry import SchemaLoadError
from spotreel.codec.release import ReleaseRefused, release


_SCHEMAS_HELP = "schemas directory (default: the installed spotreel.schemas package)"


def register(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    schemas = sub.add_parser("schemas", help="Avro schema compatibility check and release")
    ssub = schemas.add_subparsers(dest="schemas_command", metavar="ACTION")
    ssub.required = True

    check = ssub.add_parser("check", help="refuse schema changes that are not BACKWARD compatible")
    check.add_argument("--schemas", type=Path, default=None, help=_SCHEMAS_HELP)
    check.add_argument("-q", "--quiet", action="store_true", help="print only problems")
    check.set_defaults(func=_check)

    rel = ssub.add_parser("release", help="copy new or changed schemas to released/<Name>.v<N>.avsc")
    rel.add_argument("--schemas", type=Path, default=None, help=_SCHEMAS_HELP)
    rel.add_argument("--dry-run", action="store_true", help="say what would be released, write nothing")
    rel.set_defaults(func=_release)


def _check(args: argparse.Namespace, settings: object) -> int:
    try:
        reports = check_schemas(args.schemas)
    except SchemaLoadError as exc:
        print(f"schemas: {exc}", file=sys.stderr)
        return 2
    for report in reports:
        if args.quiet and report.ok:
            continue
        against = f" (vs released v{', v'.join(map(str, report.versions))})" if report.versions else ""
        print(f"{report.status:<12} {report.full_name}{against}")
        for line in (*report.problems, *report.notes):
            print(f"    {line}")
        for old, before in report.lifted:
            print(f"    v{old}: read as v{before}, then lifted (codec/upcast.py)")
    failed = sum(not r.ok for r in reports)
    print(f"{len(reports)} schemas, {failed} failing", file=sys.stderr if failed else sys.stdout)
    return 1 if failed else 0


def _release(args: argparse.Namespace, settings: object) -> int:
    try:
        plan = release(args.schemas, dry_run=args.dry_run)
    except ReleaseRefused as exc:
        for report in exc.reports:
            print(f"{report.status:<12} {report.full_name}", file=sys.stderr)
            for line in report.problems:
                print(f"    {line}", file=sys.stderr)
        print(f"release refused: {exc}", file=sys.stderr)
        return 1
    except (SchemaLoadError, ValueError, OSError) as exc:
        print(f"release failed: {exc}", file=sys.stderr)
        return 2
    verb = "would release" if args.dry_run else "released"
    for item in plan:
        print(f"{verb} {item.full_name} as {item.target}")
    if not plan:
        print("nothing to release: every schema matches its latest released version")
    return 0
