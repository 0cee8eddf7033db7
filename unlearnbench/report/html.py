"""The leaderboard as one self-contained static HTML page: inline CSS and JS, plots embedded as data
URIs, no network request of any kind. Clicking a column header sorts the method rows by that column
(again: reverse); the oracle and original rows stay on top as the references. Each setting opens with its
headline table (`leaderboard.HEADLINE_COLUMNS`, eight columns that fit a 1400 px window), and every column
follows in a table folded under a `<details>` element; a table wider than its box scrolls sideways inside
it, with the method column sticky on the left, so a row stays readable.
"""

from __future__ import annotations

import base64
import html
from pathlib import Path

from unlearnbench.report.privacy import PRIVACY_KEYS, privacy_caption, privacy_cell

CSS = """
body { font: 13px/1.4 system-ui, -apple-system, "Segoe UI", sans-serif; margin: 24px; color: #1b1f24; }
h1 { font-size: 22px; margin: 0 0 6px; } h2 { font-size: 17px; margin: 28px 0 8px; }
p.intro { max-width: 980px; color: #444; }
table { border-collapse: collapse; margin: 6px 0 10px; }
th, td { border: 1px solid #d0d7de; padding: 3px 7px; text-align: right; white-space: nowrap; }
th { background: #f3f5f7; cursor: pointer; user-select: none; }
th.label, td.label, td.status { text-align: left; }
th .arrow { color: #57606a; font-weight: normal; font-size: 12px; }
th.sorted-asc::after { content: " \\25B2"; font-size: 10px; } th.sorted-desc::after { content: " \\25BC"; font-size: 10px; }
tr.oracle td { background: #eef4ff; font-style: italic; }
td.best { background: #dafbe1; font-weight: 600; }
td.status { color: #57606a; white-space: normal; min-width: 160px; max-width: 360px; }
span.std { color: #6e7781; font-size: 11px; }
code { background: #f3f5f7; padding: 0 3px; border-radius: 3px; }
tr.incomplete td.status { color: #9a6700; }
div.scroll { max-width: 1400px; overflow-x: auto; }
table.leaderboard tr > :first-child { position: sticky; left: 0; z-index: 1; background: #fff;
  white-space: normal; min-width: 120px; max-width: 260px; box-shadow: 1px 0 0 #d0d7de; }
table.leaderboard thead tr > :first-child { background: #f3f5f7; z-index: 2; }
table.leaderboard tr.oracle > :first-child { background: #eef4ff; }
.plots img { max-width: 400px; max-height: 300px; margin: 4px 8px 4px 0; border: 1px solid #d0d7de; }
table.provenance td, table.provenance th { font-size: 12px; text-align: left; cursor: default; }
table.privacy th { cursor: default; } h3 { font-size: 14px; margin: 14px 0 4px; }
details.all { margin: 4px 0 10px; } details.all summary { cursor: pointer; color: #0969da; }
"""

JS = """
(function () {
  function value(row, index) {
    var cell = row.cells[index];
    var raw = cell ? cell.getAttribute('data-value') : null;
    if (raw === null || raw === '') return null;
    var number = Number(raw);
    return isNaN(number) ? raw : number;
  }
  function sortBy(table, th) {
    var index = Array.prototype.indexOf.call(th.parentNode.children, th);
    var asc = !th.classList.contains('sorted-asc');
    Array.prototype.forEach.call(table.querySelectorAll('th'), function (h) {
      h.classList.remove('sorted-asc', 'sorted-desc');
    });
    th.classList.add(asc ? 'sorted-asc' : 'sorted-desc');
    var body = table.tBodies[table.tBodies.length - 1];
    var rows = Array.prototype.slice.call(body.rows);
    rows.sort(function (a, b) {
      var x = value(a, index), y = value(b, index);
      if (x === null && y === null) return 0;
      if (x === null) return 1;
      if (y === null) return -1;
      var order = (typeof x === 'number' && typeof y === 'number') ? x - y : String(x).localeCompare(String(y));
      return asc ? order : -order;
    });
    rows.forEach(function (row) { body.appendChild(row); });
  }
  document.querySelectorAll('table.leaderboard').forEach(function (table) {
    table.querySelectorAll('thead th').forEach(function (th) {
      th.addEventListener('click', function () { sortBy(table, th); });
    });
  });
})();
"""


def _e(text) -> str:
    return html.escape(str(text), quote=True)


def _inline_code(text: str) -> str:
    """`code` spans of the (already escaped) Markdown intro as <code>."""
    parts = text.split("`")
    return "".join(f"<code>{part}</code>" if i % 2 else part for i, part in enumerate(parts))


def _data_uri(path: Path) -> str:
    return "data:image/png;base64," + base64.b64encode(Path(path).read_bytes()).decode("ascii")


def _table(group, columns, kind: str, status: bool) -> str:
    """One sortable table of `group` over `columns`: its reference rows pinned on top, then its methods."""
    parts = [f'<div class="scroll"><table class="leaderboard {kind}" data-group="{_e(group.slug)}"><thead><tr>']
    parts.append('<th class="label">method</th><th title="runs averaged: seeds x unlearning chains">n</th>')
    for column in columns:
        parts.append(
            f'<th data-key="{_e(column.key)}" title="{_e(column.description)}">{_e(column.title)} '
            f'<span class="arrow">{_e(column.arrow)}</span></th>'
        )
    parts.append(('<th class="label">status</th>' if status else "") + "</tr></thead>")
    if group.references:
        parts.append(
            '<tbody class="pinned">' + "".join(_row(e, columns, status) for e in group.references) + "</tbody>"
        )
    parts.append('<tbody class="methods">' + "".join(_row(e, columns, status) for e in group.entries) + "</tbody>")
    parts.append("</table></div>")
    return "".join(parts)


def _row(entry, columns, status: bool) -> str:
    classes = ["oracle"] if entry.is_reference else []
    if not entry.is_reference and any(run.status != "complete" for run in entry.runs):
        classes.append("incomplete")
    cells = [f'<td class="label" data-value="{_e(entry.label)}">{_e(entry.label)}</td>']
    cells.append(f'<td data-value="{entry.n}">{_e(entry.n_text)}</td>')
    for column in columns:
        cell = entry.cells[column.key]
        value = "" if cell.mean is None else repr(cell.mean)
        best = ' class="best"' if column.key in entry.best else ""
        title = f' title="{_e(column.description)}"'
        text = _e(cell.text(column.digits)).replace(" ± ", ' <span class="std">± ') + (
            "</span>" if cell.std is not None else ""
        )
        cells.append(f'<td{best}{title} data-value="{value}">{text}</td>')
    if status:
        cells.append(f'<td class="status" data-value="{_e(entry.status)}">{_e(entry.status)}</td>')
    return f'<tr class="{" ".join(classes)}" data-method="{_e(entry.label)}">' + "".join(cells) + "</tr>"


def _privacy_table(entry) -> str:
    """The per-request privacy numbers of a variant's unlearning chains (`leaderboard.ChainPrivacy`)."""
    privacy = entry.privacy
    rows = [
        f"<tr><td>{t + 1}</td>" + "".join(f"<td>{privacy_cell(k, privacy.requests[k][t])}</td>" for k in PRIVACY_KEYS)
        for t in range(len(privacy.requests[PRIVACY_KEYS[0]]))
    ]
    header = "<tr><th>t</th>" + "".join(f"<th>{_e(key)}</th>" for key in PRIVACY_KEYS) + "</tr>"
    return (
        f'<h3>{_e(privacy_caption(entry))}</h3><table class="privacy"><thead>{header}</thead><tbody>'
        + "</tr>".join(rows)
        + "</tr></tbody></table>"
    )


def render_html(
    groups,
    prov: dict,
    plots: dict[str, list[Path]],
    out_dir: Path,
    intro: str,
    columns: tuple[str, ...],
    cost_note: str,
) -> str:
    """The page: `intro`, each table, its plots and privacy tables, then the provenance (`columns` of each run's
    entry, and what `prov["cost"]` is the cost of: `cost_note`), as `leaderboard` writes its markdown."""
    parts = [
        "<!DOCTYPE html>",
        '<html lang="en"><head><meta charset="utf-8">',
        '<meta name="viewport" content="width=device-width, initial-scale=1">',
        "<title>unlearnbench leaderboard</title>",
        f"<style>{CSS}</style></head><body>",
        "<h1>unlearnbench leaderboard</h1>",
        f'<p class="intro">{_inline_code(_e(intro)).replace("**Bold**", "<b>Highlighted</b>")}</p>',
    ]
    if not groups:
        parts.append("<p>No run directories found.</p>")
    for group in groups:
        parts.append(f'<h2 id="{_e(group.slug)}">{_e(group.title)}</h2>')
        parts.append(_table(group, group.headline_columns, "headline", status=False))
        parts.append(
            f'<details class="all"><summary>All {len(group.columns)} columns, with each row\'s status</summary>'
            + _table(group, group.columns, "all", status=True)
            + "</details>"
        )
        images = plots.get(group.slug, [])
        if images:
            parts.append('<div class="plots">')
            parts += [f'<img alt="{_e(p.stem)}" title="{_e(p.stem)}" src="{_data_uri(p)}">' for p in images]
            parts.append("</div>")
        parts += [_privacy_table(entry) for entry in group.entries if entry.privacy is not None]
    parts.append("<h2>Provenance</h2>")
    commit = f", commit {_e(prov['git_commit'])}" if prov.get("git_commit") else ""
    parts.append(
        f"<p>Generated {_e(prov['generated'])} by unlearnbench {_e(prov['package_version'])}{commit}, "
        f"from the run directories under <code>{_e(prov['runs_dir'])}</code>. Their finished requests cost "
        f"{_e(prov['cost'])} ({_e(cost_note)}).</p>"
    )
    parts.append(
        '<div class="scroll"><table class="provenance"><thead><tr>'
        + "".join(f"<th>{k}</th>" for k in columns)
        + "</tr></thead><tbody>"
    )
    for run in prov["runs"]:
        parts.append("<tr>" + "".join(f"<td>{_e(run[k])}</td>" for k in columns) + "</tr>")
    parts.append("</tbody></table></div>")
    parts.append(f"<script>{JS}</script></body></html>")
    return "\n".join(parts) + "\n"
