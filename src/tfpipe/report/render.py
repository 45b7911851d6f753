"""A report's blocks (`document.Block`) written out: Markdown for a pull-request comment, its pictures as files
beside it (`curves.png`), and one self-contained HTML page, its pictures inside it (base64 PNG `data:` URIs),
its style inline, no script, nothing fetched from anywhere. What it does not do: write files.
"""

from __future__ import annotations

import base64
from html import escape

STYLE = """
body { font-family: system-ui, -apple-system, "Segoe UI", sans-serif; margin: 2em auto; max-width: 1150px;
       color: #212529; padding: 0 1em; }
h1 { font-size: 1.5em; } h2 { font-size: 1.2em; margin-top: 1.6em; border-bottom: 1px solid #dee2e6; }
table { border-collapse: collapse; font-size: 0.88em; margin: 0.6em 0; }
th, td { border: 1px solid #ced4da; padding: 0.3em 0.6em; text-align: left; vertical-align: top; }
th { background: #f1f3f5; } tr:nth-child(even) td { background: #f8f9fa; }
td { font-variant-numeric: tabular-nums; }
img { max-width: 100%; border: 1px solid #dee2e6; }
li { margin: 0.3em 0; }
"""


def _md_cell(text: str) -> str:
    """A table cell of GitHub's Markdown: `|` escaped, on one line."""
    return " ".join(str(text).split()).replace("|", "\\|")


def markdown(title: str, blocks: list) -> str:
    """The report as Markdown; a picture as `![alt](file)`, the file beside the page."""
    out = [f"# {title}", ""]
    for block in blocks:
        if block.kind == "h2":
            out += [f"## {block.text}", ""]
        elif block.kind == "p":
            out += [block.text, ""]
        elif block.kind == "list":
            out += [*(f"- {item}" for item in block.rows), ""]
        elif block.kind == "table":
            header, *rows = block.rows
            out.append("| " + " | ".join(map(_md_cell, header)) + " |")
            out.append("|" + "|".join("---" for _ in header) + "|")
            out += ["| " + " | ".join(map(_md_cell, row)) + " |" for row in rows]
            out.append("")
        elif block.kind == "picture":
            out += [f"![{block.text}]({block.file})", ""]
    return "\n".join(out)


def _html_block(block) -> str:
    if block.kind == "h2":
        return f"<h2>{escape(block.text)}</h2>"
    if block.kind == "p":
        return f"<p>{escape(block.text)}</p>"
    if block.kind == "list":
        return "<ul>" + "".join(f"<li>{escape(item)}</li>" for item in block.rows) + "</ul>"
    if block.kind == "table":
        header, *rows = block.rows
        head = "".join(f"<th>{escape(str(c))}</th>" for c in header)
        body = "".join("<tr>" + "".join(f"<td>{escape(str(c))}</td>" for c in row) + "</tr>" for row in rows)
        return f"<table><thead><tr>{head}</tr></thead><tbody>{body}</tbody></table>"
    if block.kind == "picture":
        data = base64.b64encode(block.data).decode("ascii")
        return f'<p><img alt="{escape(block.text)}" src="data:image/png;base64,{data}"></p>'
    return ""


def html(title: str, blocks: list) -> str:
    """The report as one HTML page that needs no other file and no network."""
    body = "\n".join(_html_block(b) for b in blocks)
    return (
        '<!DOCTYPE html>\n<html lang="en">\n<head>\n<meta charset="utf-8">\n'
        f"<title>{escape(title)}</title>\n<style>{STYLE}</style>\n</head>\n<body>\n"
        f"<h1>{escape(title)}</h1>\n{body}\n</body>\n</html>\n"
    )
