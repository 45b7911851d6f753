"""MkDocs hook (mkdocs.yml `hooks:`): images/architecture.svg, the picture on architecture.md, drawn at build time.

What it knows: every import statement (at the top or inside a function) of every module under src/tfpipe and
pipeline/, read with ast, folded to rooms (a subpackage of tfpipe, a group of top-level modules named in ROOMS,
pipeline/, or one of the OUTSIDE packages), laid out in layers (entry points at the top, leaves at the bottom;
an arrow of an import circle between rooms drawn red). What it does not: imports done by name at run time
(importlib, Hydra's `_target_`), other outside packages. It imports nothing of tfpipe, TensorFlow or MLflow."""

from __future__ import annotations

import ast
from html import escape
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
SRC = ROOT / "src" / "tfpipe"
# A top-level module (or subpackage) of tfpipe -> its room, by role; a subpackage not named here is its own room,
# a module not named here fails the build (place a new one deliberately). cli: the `tfpipe` command (its
# subcommands' command lines and the stages' shared entry core are the subpackage commands/, launch code the
# subpackage launch/); entry: what a stage's entry point checks of this host before it runs; stages: one DVC
# stage each; runtime: what TensorFlow runs on (strategies, precision, seeds, the host, the work directory);
# loop: what runs at the training loop's step boundaries; helpers: small shared TensorFlow-free code.
ROOMS = {
    **dict.fromkeys(["cli", "__main__"], "cli"),
    **dict.fromkeys(["preflight"], "entry"),
    **dict.fromkeys(["stages", "evaluate_stage", "evaluation", "layout", "records"], "stages"),
    **dict.fromkeys(["strategies", "distribute", "tfconfig", "precision", "determinism"], "runtime"),
    **dict.fromkeys(["tfstart", "hardware", "provenance", "workdir", "textnorm"], "runtime"),
    **dict.fromkeys(["hooks", "monitoring", "profiling", "progress"], "loop"),
    **dict.fromkeys(["__init__", "lean_keras", "errors", "exits"], "helpers"),
    **dict.fromkeys(["choices", "files", "interrupts", "stats", "phases", "plots_page"], "helpers"),
}
OUTSIDE = {  # top-level import name -> outside box
    **dict.fromkeys(["tensorflow", "keras", "tensorflow_datasets"], "tensorflow"),
    **{"mlflow": "mlflow", "dvc": "dvc", "hydra": "hydra", "omegaconf": "hydra"},
}
LABELS = {"tensorflow": "tensorflow / keras", "hydra": "hydra / omegaconf", "pipeline": "pipeline/"}
BOX_W, BOX_H, DUMMY_W, GAP, ROW_H, MARGIN = 136, 44, 15, 44, 92, 24
FILL = {"pipeline": "#dbeafe", "outside": "#f1f3f5", "package": "#e6fcf5", "group": "#fff9db"}
GREY, RED, MLFLOW = "#868e96", "#e03131", "#d9480f"


def on_files(files, config):
    """Add the picture (replacing a file of the same name, should docs/ hold one)."""
    from mkdocs.structure.files import File

    uri = "images/architecture.svg"
    if (old := files.get_file_from_path(uri)) is not None:
        files.remove(old)
    files.append(File.generated(config, uri, content=architecture_svg()))
    return files


def modules() -> dict:
    """{dotted module name: path} of every .py file under src/tfpipe and pipeline/."""
    paths = [*SRC.rglob("*.py"), *(ROOT / "pipeline").rglob("*.py")]
    out = {}
    for path in sorted(paths):
        parts = path.relative_to(ROOT / "src" if SRC in path.parents else ROOT).with_suffix("").parts
        out[".".join(parts[:-1] if parts[-1] == "__init__" else parts)] = path
    return out


def imports(path: Path, module: str, known) -> set:
    """What `path` imports anywhere in it: known module names, and the top-level name of anything else."""
    package = module if path.name == "__init__.py" else module.rpartition(".")[0]
    found = set()
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.Import):
            names = [a.name for a in node.names]
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                kept = package.split(".")[: len(package.split(".")) - node.level + 1]
                base = ".".join([*kept, base]).strip(".")
            names = [f"{base}.{a.name}" for a in node.names]  # a module, or a name in `base`
        else:
            continue
        for name in names:
            resolved = name
            while resolved and resolved not in known:
                resolved = resolved.rpartition(".")[0]
            found.add(resolved or name.split(".")[0])
    return found - {module}


def room_of(module: str) -> str:
    """The room of a module of tfpipe or pipeline/; a top-level module of tfpipe missing from ROOMS raises."""
    parts = module.split(".")
    if parts[0] == "pipeline":
        return "pipeline"
    name = parts[1] if len(parts) > 1 else "__init__"
    if name in ROOMS:
        return ROOMS[name]
    if (SRC / name / "__init__.py").is_file():
        return name
    raise ValueError(f"{module}: in no room of the architecture picture (add it to ROOMS in {__file__})")


def room_graph() -> tuple:
    """({room: sorted modules}, {(room, room it imports)}) for tfpipe's, pipeline/'s and the OUTSIDE rooms."""
    found = modules()
    gone = [
        n for n in ROOMS if n != "__init__" and not (SRC / f"{n}.py").is_file() and not (SRC / n).is_dir()
    ]
    if gone:
        raise ValueError(f"ROOMS in {__file__} names what src/tfpipe no longer has: {gone}")
    rooms: dict = {}
    for module in found:
        rooms.setdefault(room_of(module), []).append(module)
    edges = set()
    for module, path in found.items():
        for target in imports(path, module, found):
            to = room_of(target) if target in found else OUTSIDE.get(target)
            if to and to != room_of(module):
                edges.add((room_of(module), to))
    rooms.update({box: [] for box in sorted(set(OUTSIDE.values()))})
    return rooms, edges


def circles(nodes, edges) -> dict:
    """{node: its strongly connected component (a frozenset)}: a component of two or more is an import circle."""
    succ = {n: sorted(b for a, b in edges if a == n) for n in nodes}
    index, low, stack, comp = {}, {}, [], {}

    def visit(n):
        index[n] = low[n] = len(index)
        stack.append(n)
        for m in succ[n]:
            if m not in index:
                visit(m)
                low[n] = min(low[n], low[m])
            elif m in stack:
                low[n] = min(low[n], index[m])
        if low[n] == index[n]:
            members = frozenset(stack[stack.index(n) :])
            del stack[stack.index(n) :]
            comp.update(dict.fromkeys(members, members))

    for n in sorted(nodes):
        if n not in index:
            visit(n)
    return comp


def layers(nodes, edges) -> tuple:
    """(rows, top row first, and the arrows of import circles): a room's row is the longest path from it to
    a leaf (of the graph with each circle as one node), counted from the bottom."""
    comp = circles(nodes, edges)
    red = {(a, b) for a, b in edges if comp[a] == comp[b]}
    height: dict = {}

    def up(c):
        if c not in height:
            below = [up(comp[b]) for a, b in edges - red if a in c]
            height[c] = 1 + max(below, default=-1)
        return height[c]

    top = max(up(comp[n]) for n in nodes)
    rows = [[] for _ in range(top + 1)]
    for n in sorted(nodes):
        rows[top - height[comp[n]]].append(n)
    return rows, red


def order(rows: list, edges: set, red: set) -> tuple:
    """(rows, with a dummy node where arrows into one room cross a row, in an order of few crossings; the
    segments node -> node to draw). The arrows into one room share their dummies: a line from a room, followed
    down, joins others only on the way to the same room."""
    row_of = {n: i for i, row in enumerate(rows) for n in row}
    rows, segments = [list(row) for row in rows], set()
    for a, b in sorted(edges - red):
        path = [a, *(f"~{b}~{i}" for i in range(row_of[a] + 1, row_of[b])), b]
        segments.update(zip(path, path[1:]))
    for u, v in sorted(segments):
        for n in (u, v):
            if n.startswith("~") and n not in rows[int(n.rpartition("~")[2])]:
                rows[int(n.rpartition("~")[2])].append(n)
    up = {v: [u for u, w in segments if w == v] for row in rows for v in row}
    down = {u: [w for v, w in segments if v == u] for row in rows for u in row}
    for sweep in range(12):  # barycentre sweeps, down then up
        pos = {n: x for row in rows for x, n in enumerate(row)}
        for row in rows[1:] if sweep % 2 == 0 else rows[-2::-1]:
            near = up if sweep % 2 == 0 else down
            row.sort(key=lambda n: sum(pos[m] for m in near[n]) / len(near[n]) if near[n] else pos[n])
            pos.update({n: x for x, n in enumerate(row)})
    return rows, segments


def place(rows: list) -> tuple:
    """({node: (centre x, top y)}, width, height): each row centred, boxes and dummies side by side."""
    widths = [sum(DUMMY_W if n.startswith("~") else BOX_W + GAP for n in row) for row in rows]
    width = max(max(widths) + 2 * MARGIN, 900)  # the caption fits
    at = {}
    for i, row in enumerate(rows):
        x = (width - widths[i]) / 2
        for n in row:
            w = DUMMY_W if n.startswith("~") else BOX_W + GAP
            at[n] = (x + w / 2, MARGIN + 40 + i * ROW_H)
            x += w
    return at, width, MARGIN + 40 + len(rows) * ROW_H


def _ports(segments: set, at: dict) -> dict:
    """{(segment, end): x}: the segments leaving (end 0) or entering (end 1) a box spread along its edge, a
    dummy's all at its centre."""
    ports = {}
    for end in (0, 1):
        for node in {seg[end] for seg in segments}:
            mine = sorted((at[seg[1 - end]][0], seg) for seg in segments if seg[end] == node)
            for k, (_, seg) in enumerate(mine):
                shift = 0 if node.startswith("~") else ((k + 1) / (len(mine) + 1) - 0.5) * (BOX_W - 16)
                ports[(seg, end)] = at[node][0] + shift
    return ports


def _arrow(points: list, colour: str, width: float, head: bool = True) -> str:
    """A path through (x, y) points, vertical at each, ending in an arrowhead."""
    d = f"M{points[0][0]:.1f},{points[0][1]:.1f}"
    for (x0, y0), (x1, y1) in zip(points, points[1:]):
        mid = (y0 + y1) / 2
        d += f" C{x0:.1f},{mid:.1f} {x1:.1f},{mid:.1f} {x1:.1f},{y1:.1f}"
    marker = {GREY: "grey", RED: "red", MLFLOW: "mlflow"}[colour]
    end = f' marker-end="url(#head-{marker})"' if head else ""
    return f'<path d="{d}" fill="none" stroke="{colour}" stroke-width="{width}"{end}/>'


def _box(room: str, modules: list, x: float, y: float) -> str:
    """A room's box: its name and module count (its modules, a tooltip); an outside package's dashed."""
    kind = "outside" if not modules else "pipeline" if room == "pipeline" else "group"
    kind = "package" if modules and room not in ROOMS.values() and room != "pipeline" else kind
    label = LABELS.get(room, room + ("/" if kind == "package" else ""))
    count = "outside package" if not modules else f"{len(modules)} module" + "s" * (len(modules) > 1)
    dash = ' stroke-dasharray="5 3"' if not modules else ""
    return (
        f'<g class="room" id="room-{room}"><title>{escape(", ".join(modules) or room)}</title>'
        f'<rect x="{x - BOX_W / 2:.1f}" y="{y}" width="{BOX_W}" height="{BOX_H}" rx="6" fill="{FILL[kind]}" '
        f'stroke="#495057"{dash}/>'
        f'<text x="{x:.1f}" y="{y + 19}" text-anchor="middle" font-size="14" font-weight="bold">'
        f"{escape(label)}</text>"
        f'<text x="{x:.1f}" y="{y + 35}" text-anchor="middle" font-size="11" fill="#495057">{count}</text></g>'
    )


def architecture_svg() -> str:
    """The picture: a box per room, an arrow per room -> room it imports, a legend of the grouped rooms."""
    rooms, edges = room_graph()
    rows, red = layers(rooms, edges)
    rows, segments = order(rows, edges, red)
    at, width, height = place(rows)
    ports = _ports(segments, at)
    legend = [
        f"{room}: {', '.join(sorted(_name(m) for m, r in ROOMS.items() if r == room))}" for room in _groups()
    ]
    size = f'width="{width:.0f}" height="{height + 18 * len(legend) + 12:.0f}"'
    out = [
        f'<svg xmlns="http://www.w3.org/2000/svg" {size} font-family="sans-serif">',
        f"<defs>{_head('grey', GREY)}{_head('red', RED)}{_head('mlflow', MLFLOW)}</defs>",
        f'<rect width="100%" height="100%" fill="white"/><text x="{MARGIN}" y="{MARGIN + 6}" font-size="13" '
        'fill="#495057">An arrow: a room imports the other (at the top or inside a function). Red: an import '
        "circle. Dashed: a package from outside.</text>",
    ]
    for seg in sorted(segments):
        (u, v), colour = seg, MLFLOW if seg[1].strip("~").startswith("mlflow") else GREY
        start = (ports[(seg, 0)], at[u][1] + BOX_H)
        head = not v.startswith("~")
        points = [start, (ports[(seg, 1)], at[v][1] - 2 * head)]
        points += [] if head else [(at[v][0], at[v][1] + BOX_H)]
        out.append(_arrow(points, colour, 2.2 if colour == MLFLOW else 1.1, head))
    for a, b in sorted(red):  # within one row: an arc above it (higher for the arrow back)
        (xa, y), (xb, _), lift = at[a], at[b], 14 if a < b else 26
        out.append(_arrow([(xa, y), (xa, y - lift), (xb, y - lift), (xb, y - 2)], RED, 1.6))
    out += [_box(room, rooms[room], *at[room]) for row in rows for room in row if room in rooms]
    for k, line in enumerate(legend):
        out.append(f'<text x="{MARGIN}" y="{height + 18 + 18 * k}" font-size="12">{escape(line)}</text>')
    return "\n".join(out) + "\n</svg>\n"


def _name(module: str) -> str:
    """A top-level module's file name, or a subpackage's folder."""
    return module + "/" if (SRC / module / "__init__.py").is_file() else module + ".py"


def _groups() -> list:
    """The rooms that group top-level modules, in ROOMS' order."""
    return list(dict.fromkeys(ROOMS.values()))


def _head(name: str, colour: str) -> str:
    """An arrowhead marker."""
    return (
        f'<marker id="head-{name}" viewBox="0 0 10 10" refX="9" refY="5" markerWidth="7" markerHeight="7" '
        f'orient="auto"><path d="M0,0 L10,5 L0,10 z" fill="{colour}"/></marker>'
    )
