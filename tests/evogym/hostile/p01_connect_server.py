"""P1: connect to the benchmark server on loopback and POST /submit."""
import socket


class Policy:
    def __init__(self, obs_space, action_space, env_meta):
        self.port = env_meta["port"]

    def reset(self, episode_index):
        pass

    def act(self, obs):
        try:
            conn = socket.create_connection(("127.0.0.1", self.port), timeout=1)
            conn.sendall(b"POST /submit HTTP/1.0\r\nContent-Length: 2\r\n\r\n{}")
            return {"connected": True}
        except OSError as exc:
            return {"connected": False, "error": repr(exc)}
