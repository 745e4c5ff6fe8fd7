"""What the crash test (tests/crash) and the fault test (tests/fault) share:
dedupd processes started and signalled by PID (process), the logged client
and its history (client), the client threads' workload (workload), the
per-key checker of a history (checker) and the dedup/v1 Python stubs
(stubs).

Entry scripts put tests/ on sys.path and import `history.<module>`; the
modules that speak gRPC (client, workload) also need the generated stubs'
directory on sys.path (stubs.generate_stubs, or CMake's --gen DIR).
"""
