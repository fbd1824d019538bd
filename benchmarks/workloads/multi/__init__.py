"""Many objects in one process against one process per object
(`python -m workloads.multi`): `figures` is the parent, `children` the
measurements in fresh processes (`python -m workloads.multi --child SPEC`).
Kept free of imports: a child's cold start is timed from `__main__`'s top."""
