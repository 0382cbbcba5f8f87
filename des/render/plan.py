"""What ``des plan`` prints: a line per candidate simulated or capacity searched as the
plan goes (:func:`outcome_line`), then its answer in a few lines (:func:`answer_text`), read
off ``plan.json``'s content (:func:`des.plan.output.plan_json`)."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from des.plan.planner import Outcome


def outcome_line(o: Outcome) -> str:
    """A candidate's price per hour, verdict and why; or, once searched, its capacity (req/s)
    with its 95 % interval (an end the search left open: ``open``)."""
    if o.capacity is not None:
        value, low, high = (f"{x:.3g}" if x is not None else "open" for x in o.capacity)
        return f"{o.candidate.name:<28} capacity {value} req/s [{low}, {high}]"
    return f"{o.candidate.name:<28} ${o.usd_per_hour:>6.2f}/h  {o.verdict:<8} {o.reason}"


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
        launch = win.get("launch") or []
        nodes = {(c["gpu"], s["node"]) for c in launch for s in c.get("servers", [])}
        for cmd in launch:
            if "error" in cmd:
                lines.append(f"  launch: none: {cmd['error']}")
                continue
            role = "" if cmd["role"] == "colocated" else f"{cmd['role']} "
            if not cmd.get("servers"):  # a plan.json written before servers were placed
                lines.append(f"  launch {cmd['instances']} x {role.replace(' ', ': ')}{cmd['text']}")
            for server in cmd.get("servers", []):  # each on its devices and ports (des.plan.launch.place)
                where = f"on {cmd['gpu']} node {server['node']}: " if len(nodes) > 1 else ""
                lines.append(f"  launch {role}{where}{server['text']}")
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
