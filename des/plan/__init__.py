"""``des plan``: the cheapest configuration that meets an SLO (:mod:`des.plan.planner`)."""
