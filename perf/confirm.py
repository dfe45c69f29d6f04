#!/usr/bin/env python3
"""Grab-to-confirmed latency as a buyer sees it: grab, then poll GET /orders/{id} until the
order is no longer pending; one buyer at a time, a new user per grab.

usage: perf/confirm.py BASE_URL ACTIVITY FIRST_USER SECONDS [POLL_MS]
Prints one line: samples, then p50, p90, p99 and max in milliseconds. Used by
perf/lookup-flood.sh."""
import http.client, json, sys, time
from urllib.parse import urlparse

base, activity, user, seconds = urlparse(sys.argv[1]), sys.argv[2], int(sys.argv[3]), float(sys.argv[4])
poll = float(sys.argv[5] if len(sys.argv) > 5 else 2) / 1000
conn = http.client.HTTPConnection(base.hostname, base.port, timeout=10)

def call(method, path, uid):
    conn.request(method, path, headers={"X-User-ID": str(uid)})
    r = conn.getresponse()
    return r.status, json.loads(r.read() or b"{}")

samples, end = [], time.monotonic() + seconds
while time.monotonic() < end:
    user += 1
    began = time.perf_counter()
    status, body = call("POST", f"/api/v1/activities/{activity}/grab", user)
    if status != 202:
        sys.exit(f"grab of user {user}: {status} {body}")
    path = "/api/v1/orders/" + body["order_id"]
    while True:
        status, body = call("GET", path, user)
        if status != 200:
            sys.exit(f"{path} of user {user}: {status} {body}")
        if body["status"] != "pending":
            break
        time.sleep(poll)
    if body["status"] != "confirmed":
        sys.exit(f"{path}: {body['status']}, want confirmed")
    samples.append((time.perf_counter() - began) * 1000)
samples.sort()
q = lambda p: samples[min(len(samples) - 1, int(p * len(samples)))]
print(f"{len(samples)} {q(0.5):.2f} {q(0.9):.2f} {q(0.99):.2f} {samples[-1]:.2f}")
