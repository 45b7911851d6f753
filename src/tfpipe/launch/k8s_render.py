"""`python -m tfpipe.launch.k8s_render JOB IMAGE [--controller C] [...] [OVERRIDE ...]`: tfpipe.launch.k8s's
manifest on stdout, for `kubectl apply -f -`. Bad input (an unknown controller or runtime, a bad count, an
override the config refuses) ends it with one line on stderr and exit 2, nothing printed on stdout.

What it knows: the command line only; the manifests are render_k8s's.
"""

from __future__ import annotations

import sys

from tfpipe import strategies
from tfpipe.commands.entry import OneLineParser  # a usage error in one line, as every tfpipe command
from tfpipe.errors import ConfigError, one_line
from tfpipe.exits import EXIT_BAD_INPUT, EXIT_OK
from tfpipe.launch.k8s import CONTROLLERS, render_k8s

PROG = "python -m tfpipe.launch.k8s_render"


def main(argv=None) -> int:
    parser = OneLineParser(prog=PROG, description=__doc__.split("\n\n")[0])
    parser.add_argument("job_name")
    parser.add_argument("image")
    parser.add_argument("overrides", nargs="*", metavar="OVERRIDE", help="KEY=VALUE, as for the stages")
    parser.add_argument("--controller", default="job", help=f"one of {', '.join(CONTROLLERS)} (default: job)")
    parser.add_argument("--strategy", default=strategies.first(workers_only=True).name)
    parser.add_argument("--num-workers", type=int, default=2)
    parser.add_argument("--num-ps", type=int, default=1)
    parser.add_argument("--port", type=int, default=2222)
    parser.add_argument("--namespace", default="default")
    parser.add_argument("--runtime", default="tensorflow", help="controller trainjob: the TrainingRuntime")
    args = vars(parser.parse_intermixed_args(sys.argv[1:] if argv is None else argv))
    try:
        manifest = render_k8s(**args)
    except ConfigError as exc:
        print(f"{PROG}: error: {one_line(exc)}", file=sys.stderr)
        return EXIT_BAD_INPUT
    print(manifest, end="")
    return EXIT_OK


if __name__ == "__main__":
    raise SystemExit(main())
