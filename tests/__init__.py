"""The test suite, with what it needs that is not installed: `tests.harness`
(throwaway containerd, kubelet and API-server doubles, generated sysfs, the
demo) and `tests.bench` (`make bench`).

A regular package, not a namespace one, so `tests.harness` can never resolve
to some other distribution's `tests` in site-packages. The test modules in
the subdirectories stay outside it (no __init__.py there) and are imported by
pytest by their own names, as before.
"""
