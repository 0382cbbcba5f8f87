"""Tools beside the simulator, each behind a ``des`` subcommand: :mod:`~des.tools.calibrate`
fits the roofline's efficiency factors to a kernel profile, :mod:`~des.tools.compare`
replays a measured serving run and compares, :mod:`~des.tools.costmodel` tabulates the
roofline of one GPU and model, :mod:`~des.tools.bench` times des itself.

Like the rest of the library they take data and return data; the command line
(:mod:`des.cli`) validates flags, writes files and shows results (:mod:`des.render`,
:mod:`des.figures`). Nothing is imported here, so ``import des`` stays light.
"""
