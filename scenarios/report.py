"""The HTML report of a batch: one self-contained file, inline SVG plots, no scripts, no CDN.

Plots: success rate by scenario, success rate by error type, cost (or tokens, when every model
was free) by scenario, and termination reasons. Then pass^k, the runs cut short by
infrastructure (not graded, listed apart), and every run with its reward breakdown and full
transcript in a collapsible block.
"""

from __future__ import annotations

import html
import json
from collections import defaultdict
from collections.abc import Mapping, Sequence
from typing import Any

_CSS = """
body{font:14px/1.45 system-ui,-apple-system,Segoe UI,sans-serif;margin:24px auto;max-width:1100px;color:#1d2430;padding:0 16px}
h1{font-size:22px;margin:0 0 4px}h2{font-size:17px;margin:28px 0 8px;border-bottom:1px solid #dde2ea;padding-bottom:4px}
.meta{color:#5b6678;font-size:13px}.cards{display:flex;flex-wrap:wrap;gap:10px;margin:14px 0}
.card{border:1px solid #dde2ea;border-radius:8px;padding:8px 14px;min-width:110px}.card b{display:block;font-size:20px}
table{border-collapse:collapse;width:100%;font-size:13px}th,td{border-bottom:1px solid #e8ecf2;padding:4px 6px;text-align:left;vertical-align:top}
.ok{color:#137a3a;font-weight:600}.bad{color:#b3261e;font-weight:600}.warn{color:#9a6700}
details{margin:2px 0}summary{cursor:pointer}img.final{margin:4px 12px;max-width:256px;border:1px solid #ccc}.msg{margin:2px 0 2px 12px;white-space:pre-wrap;font-family:ui-monospace,Menlo,monospace;font-size:12px}
.user{color:#0b4f9c}.agent{color:#1d2430}.tool{color:#5b6678}.intervention{color:#8a3ffc}.greeting{color:#1d2430}
.plots{display:flex;flex-wrap:wrap;gap:18px}svg text{font:12px system-ui,sans-serif}
"""


def render_report(results: Mapping[str, Any]) -> str:
    """The report of a results.json payload, as HTML text."""
    runs: Sequence[Mapping[str, Any]] = results.get("runs", [])
    summary: Mapping[str, Any] = results.get("summary", {})
    config: Mapping[str, Any] = results.get("config", {})
    parts = [
        "<!doctype html><html lang=en><head><meta charset=utf-8>",
        "<meta name=viewport content='width=device-width,initial-scale=1'>",
        f"<title>rein run report</title><style>{_CSS}</style></head><body>",
        "<h1>rein run report</h1>",
        f"<div class=meta>{_config_line(config)}</div>",
    ]
    if not results.get("complete", True):
        parts.append("<p class=warn>This batch was interrupted; resume it with <code>rein run … --resume</code>.</p>")
    parts.append(_cards(summary))
    parts.append("<h2>Plots</h2><div class=plots>")
    by_scenario = summary.get("by_scenario", {})
    parts.append(_bars("Success rate by scenario", [(k, v["rate"], f"{v['successes']}/{v['runs']}") for k, v in by_scenario.items()], 1.0, pct=True))
    by_error = summary.get("by_error_type", {})
    parts.append(_bars("Success rate by error type", [(k, v["rate"], f"{v['successes']}/{v['runs']}") for k, v in by_error.items()], 1.0, pct=True))
    parts.append(_cost_plot(runs))
    terms = summary.get("terminations", {})
    parts.append(_bars("Termination reasons (runs)", [(k, float(v), str(v)) for k, v in terms.items()], float(max(terms.values(), default=1))))
    parts.append("</div>")
    parts.append(_pass_k(summary.get("pass_k", {})))
    parts.append(_infrastructure(summary.get("infrastructure_errors") or {}))
    parts.append(_runs_table(runs))
    parts.append("</body></html>\n")
    return "".join(parts)


def _e(value: Any) -> str:
    return html.escape(str(value), quote=True)


def _config_line(config: Mapping[str, Any]) -> str:
    keys = ("model", "user_model", "judge_model", "interventions", "mode", "trials", "inject")
    shown = [f"{k}: <b>{_e(json.dumps(config[k]) if isinstance(config[k], list) else config[k])}</b>" for k in keys if config.get(k) not in (None, [], "")]
    return " · ".join(shown) or "no configuration recorded"


def _cards(summary: Mapping[str, Any]) -> str:
    rate = summary.get("success_rate")
    items = [
        ("runs", summary.get("runs", 0)),
        ("scenarios", summary.get("scenarios", 0)),
        ("success rate", "–" if rate is None else f"{rate:.0%}"),
        ("mean reward", "–" if summary.get("mean_reward") is None else f"{summary['mean_reward']:.3f}"),
        ("cost (USD)", f"{summary.get('cost_usd', 0):.4f}"),
        ("agent tokens", summary.get("agent_tokens", 0)),
        ("mean turns", summary.get("mean_turns", "–")),
        ("tool errors", summary.get("tool_errors", 0)),
    ]
    if summary.get("incomplete_grades"):
        items.append(("incomplete grades", summary["incomplete_grades"]))
    infra = (summary.get("infrastructure_errors") or {}).get("runs", 0)
    if infra:
        items.append(("infrastructure errors (not graded)", infra))
    cards = "".join(f"<div class=card>{_e(label)}<b>{_e(value)}</b></div>" for label, value in items)
    return f"<div class=cards>{cards}</div>"


def _bars(title: str, rows: list[tuple[str, float, str]], top: float, *, pct: bool = False) -> str:
    """A horizontal bar chart as inline SVG."""
    width, label_w, bar_w, row_h = 520, 200, 240, 22
    height = 34 + row_h * max(len(rows), 1)
    out = [f"<svg width={width} height={height} viewBox='0 0 {width} {height}' role=img aria-label='{_e(title)}'>"]
    out.append(f"<text x=0 y=16 font-weight=600>{_e(title)}</text>")
    if not rows:
        out.append("<text x=0 y=44 fill='#5b6678'>no data</text>")
    for i, (label, value, note) in enumerate(rows):
        y = 28 + i * row_h
        frac = 0.0 if top <= 0 else max(0.0, min(1.0, value / top))
        color = "#2f7d4f" if not pct else ("#2f7d4f" if value >= 0.999 else "#c9772b" if value > 0 else "#b3261e")
        short = label if len(label) <= 30 else label[:29] + "…"
        out.append(f"<text x=0 y={y + 14}><title>{_e(label)}</title>{_e(short)}</text>")
        out.append(f"<rect x={label_w} y={y + 3} width={bar_w} height={row_h - 8} fill='#eef1f6'/>")
        out.append(f"<rect x={label_w} y={y + 3} width={frac * bar_w:.1f} height={row_h - 8} fill='{color}'/>")
        shown = f"{value:.0%} ({note})" if pct else note
        out.append(f"<text x={label_w + bar_w + 6} y={y + 14}>{_e(shown)}</text>")
    out.append("</svg>")
    return "".join(out)


def _cost_plot(runs: Sequence[Mapping[str, Any]]) -> str:
    cost: dict[str, float] = defaultdict(float)
    tokens: dict[str, float] = defaultdict(float)
    count: dict[str, int] = defaultdict(int)
    for r in runs:
        t = r["trajectory"]
        sid = r["scenario_id"]
        cost[sid] += float(t["agent_usage"].get("cost_usd", 0)) + float(t["user_usage"].get("cost_usd", 0))
        tokens[sid] += float(t["agent_usage"].get("input_tokens", 0)) + float(t["agent_usage"].get("output_tokens", 0))
        count[sid] += 1
    if any(cost.values()):
        rows = [(k, cost[k] / count[k], f"${cost[k] / count[k]:.4f}") for k in cost]
        return _bars("Mean cost per run (USD)", rows, max(v for _, v, _ in rows))
    rows = [(k, tokens[k] / count[k], f"{tokens[k] / count[k]:.0f} tok") for k in tokens]
    return _bars("Mean agent tokens per run (models were free)", rows, max((v for _, v, _ in rows), default=1.0))


def _pass_k(table: Mapping[str, Any]) -> str:
    if not table:
        return ""
    head = "".join(f"<th>pass^{_e(k)}</th>" for k in table)
    cells = "".join(f"<td>{float(v):.3f}</td>" for v in table.values())
    return f"<h2>pass^k</h2><table><tr>{head}</tr><tr>{cells}</tr></table>"


def _infrastructure(infra: Mapping[str, Any]) -> str:
    if not infra.get("runs"):
        return ""
    terms = ", ".join(f"{k} {v}" for k, v in infra.get("by_termination", {}).items())
    keys = ", ".join(infra.get("keys", []))
    return (
        "<h2>Infrastructure errors</h2><p class=warn>"
        f"{_e(infra['runs'])} run(s) were cut short by the model or the user simulator ({_e(terms)}). "
        "They are not agent failures: success rates and pass^k leave them out.</p>"
        f"<div class=msg>{_e(keys)}</div>"
    )


def _runs_table(runs: Sequence[Mapping[str, Any]]) -> str:
    rows = ["<h2>Runs</h2><table><tr><th>scenario</th><th>trial</th><th>termination</th><th>reward</th>"
            "<th>components</th><th>turns</th><th>cost</th></tr>"]
    for r in runs:
        ev, t = r["evaluation"], r["trajectory"]
        ok = "ok" if ev.get("success") else "bad"
        reward = f"{float(ev.get('reward', 0)):.2f}"
        if ev.get("infrastructure_error"):
            ok, reward = "warn", "infrastructure error"
        comps = ", ".join(f"{k}={'–' if v is None else f'{v:g}'}" for k, v in ev.get("components", {}).items() if k in ev.get("basis", []))
        rows.append(
            f"<tr><td>{_e(r['scenario_id'])}</td><td>{_e(r['trial'])}</td><td>{_e(t['termination'])}</td>"
            f"<td class={ok}>{_e(reward)}</td><td>{_e(comps)}</td><td>{len(t.get('turns', []))}</td>"
            f"<td>{float(r.get('cost_usd', 0)):.4f}</td></tr>"
        )
        rows.append(f"<tr><td colspan=7>{_environment(t.get('environment') or {})}{_details(r)}</td></tr>")
    rows.append("</table>")
    return "".join(rows)


def _details(r: Mapping[str, Any]) -> str:
    ev, t = r["evaluation"], r["trajectory"]
    lines = []
    for group in ("actions", "communicate", "env_assertions", "nl_assertions", "recovery", "forbidden"):
        for c in ev.get(group, []):
            mark = "✔" if c["met"] else "✘"
            lines.append(f"<div class=msg>{mark} {_e(group)}: {_e(c['name'])} {_e(c.get('detail', ''))}</div>")
    if ev.get("db", {}).get("checked"):
        lines.append(f"<div class=msg>{'✔' if ev['db']['match'] else '✘'} DB hash {'matches' if ev['db']['match'] else 'differs from'} the gold replay</div>")
    for note in ev.get("notes", []):
        lines.append(f"<div class='msg warn'>note: {_e(note)}</div>")
    if t.get("termination_detail"):
        lines.append(f"<div class='msg warn'>{_e(t['termination'])}: {_e(t['termination_detail'])}</div>")
    for m in t.get("messages", []):
        lines.append(_message(m))
    return f"<details><summary>transcript and checks ({len(t.get('messages', []))} messages)</summary>{''.join(lines)}</details>"


def _environment(env: Mapping[str, Any]) -> str:
    """An episode's end state: the final arrangement (a PNG data URI, nothing fetched) and its metrics."""
    if not env:
        return ""
    result = env.get("result") or {}
    facts = ", ".join(f"{k}={result[k]}" for k in ("solved", "score", "steps", "reward", "termination") if k in result)
    image = str(env.get("final_image") or "")
    # Only an inline PNG is embedded: the report stays self-contained and loads nothing.
    picture = (f"<img class=final alt='final arrangement' src='{_e(image)}'>"
               if image.startswith("data:image/png;base64,") else "")
    return f"<div class=msg>{_e(env.get('kind', 'environment'))} end state: {_e(facts)}</div>{picture}"


def _message(m: Mapping[str, Any]) -> str:
    source = m.get("source", "agent")
    text = m.get("content") if isinstance(m.get("content"), str) else json.dumps(m.get("content"))
    bits = [f"[{m.get('turn', 0)}] {source}"]
    if m.get("reasoning"):
        bits.append(f"(reasoning: {m['reasoning']})")
    if text:
        bits.append(text)
    for tc in m.get("tool_calls", []):
        bits.append(f"→ {tc['name']}({tc['arguments']})")
    if m.get("role") == "tool":
        bits[0] += f" {m.get('name')}{' ERROR' if m.get('is_error') else ''}"
    if m.get("metadata", {}).get("injected_error"):
        bits.append(f"[injected {m['metadata']['injected_error']}]")
    return f"<div class='msg {_e(source)}'>{_e(' '.join(bits))}</div>"
