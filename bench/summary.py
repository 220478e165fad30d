"""Every recorded benchmark report's targets side by side, as Markdown on stdout:

    .venv/bin/python -m bench.summary                      # bench/results/*.json
    .venv/bin/python -m bench.summary a.json b.json --last 4

On these 2-core VMs one run judges a target near its limit either way: their speed drifts by 10-40 % within
minutes and differs by up to 3x between VM types. So this reads the record. For each target, it says in how many
of the reports that judged it the target was met, and it shows each of the last reports' figures (bold: missed).
The targets are judged by `bench.report.targets`, the same code that writes each report's own table. A
`bench.bench_store --json` file counts as a report of the store alone; other files in the folder (the re-index
benchmark's) are left out.
"""

from __future__ import annotations

import argparse
import json
import re
from collections.abc import Iterable, Sequence
from pathlib import Path

from .report import cpu_line, targets

RESULTS = Path(__file__).resolve().parent / "results"
_NUMBER = re.compile(r"-?\d+(?:\.\d+)?")


def load(paths: Iterable[Path]) -> list[tuple[str, dict]]:
    """(name, report) for each file that is a `bench.report` report or a `bench.bench_store --json` one (read as a
    report with its store section only), oldest first (by the report's date, else the file name's)."""
    reports = []
    for path in map(Path, paths):
        report = json.loads(path.read_text(encoding="utf-8"))
        if not isinstance(report, dict):
            continue
        if report.get("name") == "store" and "data" in report:
            report = {"machine": {}, "store": {"data": report["data"]}}
        if "machine" in report and ("mesh" in report or "store" in report):
            reports.append((path.stem, report))
    return sorted(reports, key=lambda item: (item[1].get("date") or item[0], item[0]))


def figure(measured: str) -> str:
    """The figure a target is judged on, out of the report's text for it: the first number after the last '='
    when there is one ('4.26 - 2.95 = 1.31 ms' -> '1.31'), else the first number ('0.84 (rounds: ...)' -> '0.84')."""
    match = _NUMBER.search(measured.rsplit("=", 1)[-1])
    return match.group(0) if match else measured


def summary(reports: Sequence[tuple[str, dict]], last: int = 6) -> str:
    judged: dict[str, dict[str, tuple[str, bool]]] = {}  # target -> report name -> (figure, met)
    for name, report in reversed(reports):  # the newest report's targets first, in its order
        for target, measured, met in targets(report):
            if met is not None:
                judged.setdefault(target, {})[name] = (figure(measured), met)
    shown = [name for name, _ in reports][-last:]
    lines = [
        "| target | met in | " + " | ".join(shown) + " |",
        "|---|---|" + "---|" * len(shown),
    ]
    for target, runs in judged.items():
        met = sum(ok for _, ok in runs.values())
        cells = ["" if (run := runs.get(name)) is None else run[0] if run[1] else f"**{run[0]}**" for name in shown]
        lines.append(f"| {target} | {met} of {len(runs)} | " + " | ".join(cells) + " |")
    lines.append("")
    for name, report in reports:
        if name in shown:
            machine = report["machine"]
            lines.append(
                f"- {name}: {report.get('date', '?')[:16]}, commit {machine.get('commit', '?')}, "
                f"{cpu_line(machine)}, {machine.get('cpus_usable', '?')} CPUs"
            )
    return "\n".join(lines) + "\n"


def main(argv: list[str] | None = None) -> str:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("reports", nargs="*", type=Path, help="report JSON files (default: bench/results/*.json)")
    parser.add_argument("--last", type=int, default=6, help="how many of the newest reports get a column")
    args = parser.parse_args(argv)
    text = summary(load(args.reports or sorted(RESULTS.glob("*.json"))), last=args.last)
    print(text, end="")
    return text


if __name__ == "__main__":
    main()
