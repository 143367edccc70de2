import time, sys
end = time.monotonic() + float(sys.argv[1]); worst = 0; worst_at = 0; t0 = time.monotonic(); over = []
while True:
    t = time.monotonic()
    if t > end: break
    time.sleep(0.001)
    d = time.monotonic() - t - 0.001
    if d > 0.01: over.append((round(t - t0, 3), round(d * 1000, 1)))
    if d > worst: worst, worst_at = d, t - t0
print(f"hiccup: worst oversleep {worst*1000:.1f} ms at {worst_at:.2f}s; >10ms: {over[:10]}")
