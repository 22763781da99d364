"""The critical path of a timeline already measured: a `time_layers --timeline --jobs-csv`
file read against the job graph of the build it came from.

    python -m tools.critical_path FILE.csv --kind index --config glm5 --rows 8 [--tp 8]
                                  [--kv fp8] [--target sm_90a] [--tune STAGE.ATTR=VALUE ...]

time_layers --timeline prints the same table after its stage rows; this reads the files
bench/ keeps (bench/profiles/, the results tarballs' jobs CSVs) without a GPU. Each line is a
job the launch waited for, from the first to the one that ends last, with what it followed:
its data ("waits for": the dependency that ended last) or its CTA ("after": the job its CTA
ran before it). The build options must be the file's (the same job graph and placement;
the target sets the grid, so the jobs: sm_90a for an NVIDIA timeline, interp for the
interpreter's; a placement --tune, launch.lead_alone or launch.profile, as it was timed): a
job the build lacks or places elsewhere is an error naming it. Rules: monokernel/critical.py.
"""
from __future__ import annotations

import argparse
import sys

from monokernel.critical import critical_path, path_rows, read_timeline_csv
from tools import common


def _parser() -> argparse.ArgumentParser:
    ap = argparse.ArgumentParser(prog="python -m tools.critical_path",
                                 description=__doc__.split("\n\n")[0],
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("csv", help="a time_layers --timeline --jobs-csv file")
    common.add_spec_options(ap, config="glm5", kv=["fp8"],
                            kind_help="the launch kind the file timed (default index)")
    ap.add_argument("--target", default="sm_90a",
                    help="the target the file was timed on: its grid (default sm_90a)")
    return ap


def main(argv=None) -> int:
    ap = _parser()
    args = ap.parse_args(argv)
    kinds = args.kind or ["index"]
    if len(kinds) != 1 or len(args.rows) != 1 or len(args.kv) != 1:
        ap.error("one --kind, one --rows and one --kv: the build the file timed")
    from stages import kinds as kind_table
    kind = kind_table.kind(kinds[0])
    try:
        spec = common.make_spec(args.config, args.tp, args.rows[0], args.kv[0], args.target)
        launch = common.launch_for(kind, spec, args.tune)
        records, unit = read_timeline_csv(args.csv)
        path = critical_path(launch.graph, records, launch.schedule)
    except ValueError as e:
        print(f"error: {e}", file=sys.stderr)
        return 2
    rows = path_rows(path, 1.0, unit)
    print(f"critical path of {args.csv} ({kind.name} {spec.path}, {len(path)} jobs, {unit}):")
    print(common.table(rows, list(rows[0])))
    return 0


if __name__ == "__main__":
    sys.exit(main())
