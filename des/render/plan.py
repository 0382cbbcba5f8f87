"""What ``des plan`` prints: its answer in a few lines (:func:`answer_text`), read off
``plan.json``'s content (:func:`des.plan.output.plan_json`)."""

from __future__ import annotations

from typing import Any


def answer_text(body: dict[str, Any]) -> str:
    """The answer in a few lines for the terminal."""
    lines = [body["answer"]]
    win = body.get("winner")
    if win is not None:
        for t, m in win["slo_metrics"].items():
            lines.append(f"  {t}: {m['mean']:.4g} [{m['low']:.4g}, {m['high']:.4g}]")
        lines.append(
            f"  ${win['cost_per_million_tokens']:.4f} and at most {win['kwh_per_million_tokens']:.3g} kWh "
            "(board power) per million output tokens at the target rate"
        )
        for cmd in win.get("launch") or []:
            if "error" in cmd:
                lines.append(f"  launch: none: {cmd['error']}")
                continue
            role = f"{cmd['instances']} x " + ("" if cmd["role"] == "colocated" else f"{cmd['role']}: ")
            lines.append(f"  launch {role}{cmd['text']}")
        for o in body.get("runners_up", []):
            lines.append(f"runner-up: {o['name']} at ${o['cost_per_hour']:.2f} per hour")
        for o in body.get("cheaper", [])[:8]:
            lines.append(f"cheaper, {o['verdict']}: {o['name']} at ${o['cost_per_hour']:.2f}: {o['reason']}")
    v = body["verdicts"]
    why = ", ".join(f"{n} {k}" for k, n in body["pruned"].items() if n)
    lines.append(
        f"{body['candidates']} candidates: {v['pass']} pass, {v['marginal']} marginal, {v['fail']} fail, "
        f"{v['pruned']} pruned{f' ({why})' if why else ''}; {body['simulated']} simulated"
    )
    return "\n".join(lines)
