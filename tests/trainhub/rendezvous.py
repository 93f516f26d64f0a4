"""A two-process job for the local backend: worker 0 listens, the others connect to it."""

import os
import socket
import sys
import time

host, port = os.environ["COORDINATOR_ADDRESS"], int(os.environ["COORDINATOR_PORT"])
rank, world = int(os.environ["PROCESS_ID"]), int(os.environ["NUM_PROCESSES"])
if rank == 0:
    with socket.create_server((host, port)) as server:
        server.settimeout(30)
        peers = []
        for _ in range(world - 1):
            conn, _ = server.accept()
            peers.append(conn.recv(64).decode())
            conn.close()
    print(f"coordinator on port {port} met {sorted(peers)}")
else:
    deadline = time.monotonic() + 30
    while True:
        try:
            with socket.create_connection((host, port), timeout=5) as conn:
                conn.sendall(f"rank-{rank}".encode())
            break
        except OSError:
            if time.monotonic() > deadline:
                sys.exit(70)
            time.sleep(0.1)
    print(f"rank {rank} reached the coordinator on port {port}")
