"""``des plan``: the cheapest configuration that meets an SLO, and the command that launches it."""
