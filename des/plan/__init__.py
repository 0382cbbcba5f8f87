"""``des plan``: the cheapest configuration that meets an SLO (:mod:`des.plan.planner`), and the
command that launches it (:mod:`des.plan.launch`); the question and its answer as the command
and the page ask them (:mod:`des.plan.question`), the files written (:mod:`des.plan.output`)."""
