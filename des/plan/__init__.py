"""``des plan``: the cheapest configuration that meets an SLO (:mod:`des.plan.planner`), and the
command that launches it (:mod:`des.plan.launch`)."""
