"""Compile placement's hot modules with mypyc (dispatcher/native.py), or say which code runs.

Usage: python -m dispatcher.build_native [--optional] [--status]
"""

from __future__ import annotations

import argparse
import sys

from dispatcher.native import active, build, build_dir


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument(
        "--optional",
        action="store_true",
        help="a failed build (no C compiler) is a warning: placement stays plain Python",
    )
    parser.add_argument("--status", action="store_true", help="only say which code runs")
    args = parser.parse_args()
    if args.status:
        print(f"placement: {'compiled' if active() else 'plain Python'} (build {build_dir()})")
        return
    try:
        build()
    except (RuntimeError, OSError) as error:
        if not args.optional:
            raise SystemExit(f"native build failed: {error}") from error
        print(f"warning: placement stays plain Python; {error}", file=sys.stderr)


if __name__ == "__main__":
    main()
