"""Cost of the Python layer: publish N 32-byte messages, then poll them back
(shared memory). Run: python python/benchmarks/publish_poll.py"""
import time, tempfile, mdbus
d = tempfile.mkdtemp()
bus = mdbus.Bus.from_toml(f'transport = "shm"\n[shm]\ndir = "{d}"\n[streams.md]\nmax_message = 64\ncapacity = 262144\n')
pub = bus.publisher("md"); sub = bus.subscriber("md")
N = 200_000
msg = b"x" * 32
for _ in range(3):
    t0 = time.perf_counter_ns()
    for _ in range(N):
        pub.publish(msg)
    t1 = time.perf_counter_ns()
    got = 0
    while got < N:
        got += len(sub.poll())
    t2 = time.perf_counter_ns()
    print(f"publish {(t1-t0)/N:.0f} ns/msg, poll {(t2-t1)/N:.0f} ns/msg")
