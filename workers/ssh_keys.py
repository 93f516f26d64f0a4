"""An SSH key pair as Kubeflow Trainer's MPI plugin makes one for a TrainJob's
`<job>-mpi-ssh-auth` Secret: ECDSA on NIST P-521, the private key PEM-encoded as SEC 1
(`EC PRIVATE KEY`, Go's x509.MarshalECPrivateKey), the public key in authorized_keys form
(`ecdsa-sha2-nistp521 ...`, Go's ssh.MarshalAuthorizedKey). Pure Python: the curve arithmetic
is a few hundred modular inversions, done once per job."""

from __future__ import annotations

import base64
import secrets
from dataclasses import dataclass

# SEC 2 / FIPS 186-4 curve P-521 (secp521r1): y^2 = x^3 - 3x + b over GF(2^521 - 1).
P = 2**521 - 1
A = P - 3
B = int(
    "0051953eb9618e1c9a1f929a21a0b68540eea2da725b99b315f3b8b489918ef109e156193951ec7e937b1652c0"
    "bd3bb1bf073573df883d2c34f1ef451fd46b503f00",
    16,
)
GX = int(
    "00c6858e06b70404e9cd9e3ecb662395b4429c648139053fb521f828af606b4d3dbaa14b5e77efe75928fe1dc1"
    "27a2ffa8de3348b3c1856a429bf97e7e31c2e5bd66",
    16,
)
GY = int(
    "011839296a789a3bc0045c8a5fb42c7d1bd998f54449579b446817afbd17273e662c97ee72995ef42640c550b9"
    "013fad0761353c7086a272c24088be94769fd16650",
    16,
)
N = int(
    "01fffffffffffffffffffffffffffffffffffffffffffffffffffffffffffffffffa51868783bf2f966b7fcc01"
    "48f709a5d03bb5c9b8899c47aebb6fb71e91386409",
    16,
)
SIZE = 66
"""Bytes of a coordinate or scalar: (521 + 7) // 8."""
CURVE_OID = bytes([0x2B, 0x81, 0x04, 0x00, 0x23])
"""1.3.132.0.35, secp521r1."""
SSH_KEY_TYPE = b"ecdsa-sha2-nistp521"
SSH_CURVE = b"nistp521"

Point = tuple[int, int] | None
"""Affine coordinates; None is the point at infinity."""


def on_curve(point: Point) -> bool:
    if point is None:
        return True
    x, y = point
    return (y * y - (x * x * x + A * x + B)) % P == 0


def add(p: Point, q: Point) -> Point:
    if p is None:
        return q
    if q is None:
        return p
    (x1, y1), (x2, y2) = p, q
    if x1 == x2 and (y1 + y2) % P == 0:
        return None
    if p == q:
        slope = (3 * x1 * x1 + A) * pow(2 * y1, -1, P) % P
    else:
        slope = (y2 - y1) * pow(x2 - x1, -1, P) % P
    x3 = (slope * slope - x1 - x2) % P
    return x3, (slope * (x1 - x3) - y1) % P


def multiply(k: int, point: Point) -> Point:
    result: Point = None
    addend = point
    while k:
        if k & 1:
            result = add(result, addend)
        addend = add(addend, addend)
        k >>= 1
    return result


def _der(tag: int, body: bytes) -> bytes:
    length = len(body)
    if length < 0x80:
        encoded = bytes([length])
    else:
        raw = length.to_bytes((length.bit_length() + 7) // 8, "big")
        encoded = bytes([0x80 | len(raw)]) + raw
    return bytes([tag]) + encoded + body


def _ssh_string(value: bytes) -> bytes:
    return len(value).to_bytes(4, "big") + value


@dataclass(frozen=True)
class SSHKeyPair:
    private_pem: str
    """`-----BEGIN EC PRIVATE KEY-----` ... (the Secret's `ssh-privatekey`)."""
    authorized_key: str
    """`ecdsa-sha2-nistp521 AAAA...` and a newline (the Secret's `ssh-publickey`)."""


def ecdsa_p521_key_pair(private: int | None = None) -> SSHKeyPair:
    """A fresh key pair (`private`: a given scalar in [1, N), for tests)."""
    d = private if private is not None else secrets.randbelow(N - 1) + 1
    if not 0 < d < N:
        raise ValueError("the private scalar must be in [1, N)")
    public = multiply(d, (GX, GY))
    if public is None:  # d < N: never
        raise ValueError("the private scalar gave the point at infinity")
    x, y = public
    point = b"\x04" + x.to_bytes(SIZE, "big") + y.to_bytes(SIZE, "big")
    sec1 = _der(
        0x30,
        _der(0x02, b"\x01")
        + _der(0x04, d.to_bytes(SIZE, "big"))
        + _der(0xA0, _der(0x06, CURVE_OID))
        + _der(0xA1, _der(0x03, b"\x00" + point)),
    )
    body = base64.b64encode(sec1).decode()
    lines = [body[i : i + 64] for i in range(0, len(body), 64)]
    pem = "-----BEGIN EC PRIVATE KEY-----\n" + "\n".join(lines) + "\n-----END EC PRIVATE KEY-----\n"
    blob = _ssh_string(SSH_KEY_TYPE) + _ssh_string(SSH_CURVE) + _ssh_string(point)
    authorized = f"{SSH_KEY_TYPE.decode()} {base64.b64encode(blob).decode()}\n"
    return SSHKeyPair(private_pem=pem, authorized_key=authorized)
