"""P2: resolve a public name and send a UDP datagram to the host."""
import socket


class Policy:
    def __init__(self, obs_space, action_space, env_meta):
        self.port = env_meta["port"]

    def reset(self, episode_index):
        pass

    def act(self, obs):
        report = {}
        try:
            report["dns"] = repr(socket.getaddrinfo("example.com", 443))
        except OSError as exc:
            report["dns_error"] = repr(exc)
        try:
            sock = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
            sock.sendto(b"leak", ("127.0.0.1", self.port))
            report["udp"] = "sent"
        except OSError as exc:
            report["udp_error"] = repr(exc)
        return report
