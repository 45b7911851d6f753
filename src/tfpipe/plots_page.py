"""The page `dvc plots show` / `dvc plots diff` fill in (`plots.html_template` in .dvc/config): DVC's own page
loads Vega, Vega-Lite and Vega-Embed from a CDN, so offline its plots stay blank; this one carries them inline.

What it knows: DVC's template placeholders (`{plot_divs}`, `{refresh_tag}`; no `{scripts}`, where DVC would put
its CDN script tags) and vl-convert's JavaScript bundle of the three libraries, at the Vega-Lite version DVC's
plot templates are written for. What it does not: which plots a project draws (dvc.yaml), nor any network.

`python -m tfpipe.plots_page .dvc/plots.html` writes the page (this repository's copy is committed;
`tfpipe init` writes one into each new project).
"""

from __future__ import annotations

import sys
from pathlib import Path

from tfpipe.exits import EXIT_BAD_INPUT, EXIT_OK

VEGA_LITE = "5.21"  # DVC 3's plot templates declare the Vega-Lite v5 schema
TEMPLATE_NAME = "plots.html"  # beside .dvc/config: `plots.html_template` is read relative to .dvc/

_HEAD = """<!DOCTYPE html>
<html>
<head>
    <meta charset="utf-8">
    {refresh_tag}
    <title>DVC plots</title>
    <!-- Vega, Vega-Lite and Vega-Embed, inline (vl-convert %s, Vega-Lite %s): this page needs no network -->
    <script type="text/javascript">
"""
_TAIL = """
    </script>
    <style>
        table {
            border-spacing: 15px;
        }
    </style>
</head>
<body>
    {plot_divs}
</body>
</html>
"""


def page() -> str:
    """The HTML template: DVC's placeholders around the inline JavaScript bundle."""
    import vl_convert

    # snippet=None: vl-convert's own default snippet (vegaEmbed, vegaLite and vega set on `window`), which the
    # installed function takes (help(vl_convert.javascript_bundle): `snippet=None`); its stub says `str`.
    bundle = vl_convert.javascript_bundle(snippet=None, vl_version=VEGA_LITE)  # type: ignore[arg-type]
    if "</script" in bundle.lower() or "{plot_divs}" in bundle:
        raise ValueError("vl-convert's bundle cannot be inlined in a <script> element of DVC's template")
    version = vl_convert.__version__  # type: ignore[attr-defined]  # the module has it; its stub omits it
    return _HEAD % (version, VEGA_LITE) + bundle + _TAIL


def write(path: Path) -> Path:
    """Write the page to `path` (its folder must exist); returns `path`."""
    path.write_text(page(), encoding="utf-8")
    return path


def main(argv=None) -> int:
    args = sys.argv[1:] if argv is None else argv
    if len(args) != 1 or not Path(args[0]).parent.is_dir():
        print(
            "usage: python -m tfpipe.plots_page PATH (in an existing folder, e.g. .dvc/plots.html)",
            file=sys.stderr,
        )
        return EXIT_BAD_INPUT
    write(Path(args[0]))
    return EXIT_OK


if __name__ == "__main__":
    raise SystemExit(main())
