"""TLS and an API key: a server with `security.tls_cert`/`tls_key` and one principal."""

from __future__ import annotations

import asyncio
import datetime as dt
import hashlib
import ipaddress
import pathlib
import secrets
import threading

import pytest

import fairway
from conftest import wait_until
from test_worker import run_in_thread, stop_and_join


def make_pki(directory: pathlib.Path):
    """A CA and a certificate for 127.0.0.1/localhost signed by it (PEM files)."""
    from cryptography import x509
    from cryptography.hazmat.primitives import hashes, serialization
    from cryptography.hazmat.primitives.asymmetric import ec
    from cryptography.x509.oid import NameOID

    now = dt.datetime.now(dt.timezone.utc)

    def name(cn: str) -> x509.Name:
        return x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, cn)])

    ca_key = ec.generate_private_key(ec.SECP256R1())
    ca_cert = (
        x509.CertificateBuilder()
        .subject_name(name("fairway python test CA"))
        .issuer_name(name("fairway python test CA"))
        .public_key(ca_key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(now - dt.timedelta(minutes=5))
        .not_valid_after(now + dt.timedelta(days=1))
        .add_extension(x509.BasicConstraints(ca=True, path_length=None), critical=True)
        .add_extension(
            x509.KeyUsage(
                digital_signature=True,
                content_commitment=False,
                key_encipherment=False,
                data_encipherment=False,
                key_agreement=False,
                key_cert_sign=True,
                crl_sign=True,
                encipher_only=False,
                decipher_only=False,
            ),
            critical=True,
        )
        .sign(ca_key, hashes.SHA256())
    )
    key = ec.generate_private_key(ec.SECP256R1())
    cert = (
        x509.CertificateBuilder()
        .subject_name(name("localhost"))
        .issuer_name(ca_cert.subject)
        .public_key(key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(now - dt.timedelta(minutes=5))
        .not_valid_after(now + dt.timedelta(days=1))
        .add_extension(
            x509.SubjectAlternativeName(
                [x509.DNSName("localhost"), x509.IPAddress(ipaddress.ip_address("127.0.0.1"))]
            ),
            critical=False,
        )
        .add_extension(x509.BasicConstraints(ca=False, path_length=None), critical=True)
        .sign(ca_key, hashes.SHA256())
    )
    pem = serialization.Encoding.PEM
    paths = {"ca": directory / "ca.pem", "cert": directory / "server.pem", "key": directory / "server.key"}
    paths["ca"].write_bytes(ca_cert.public_bytes(pem))
    paths["cert"].write_bytes(cert.public_bytes(pem))
    paths["key"].write_bytes(
        key.private_bytes(pem, serialization.PrivateFormat.PKCS8, serialization.NoEncryption())
    )
    return paths


@pytest.fixture(scope="module")
def secure_server(tmp_path_factory):
    from conftest import ServerProcess

    pki = make_pki(tmp_path_factory.mktemp("pki"))
    key = "fwk_" + secrets.token_hex(32)
    config = (
        f'[security]\ntls_cert = "{pki["cert"]}"\ntls_key = "{pki["key"]}"\n\n'
        f'[[security.principals]]\nname = "python-tests"\n'
        f'api_key_sha256 = ["{hashlib.sha256(key.encode()).hexdigest()}"]\n'
        f'grants = [{{ role = "admin", queues = ["*"] }}]\n'
    )
    server = ServerProcess(config=config, name="tls").start()
    yield server, pki, key
    server.stop()


def test_tls_and_api_key_work_and_bad_tokens_are_unauthenticated(secure_server):
    server, pki, key = secure_server
    with fairway.Client(server.address, ca_file=str(pki["ca"]), token=key) as client:
        client.create_queue("secure")
        added = client.add("secure", b"over tls")
        task = client.poll("secure", wait=5)
        assert task is not None and task.payload == b"over tls" and task.task_id == added.task_id
        client.complete(task)
        assert client.describe_queue("secure").completed == 1
    for token in ("fwk_" + "0" * 64, "noise", None):
        with fairway.Client(f"https://{server.address}", ca_file=str(pki["ca"]), token=token) as client:
            with pytest.raises(fairway.Unauthenticated) as error:
                client.describe_queue("secure")
            assert not error.value.maybe_applied
    # Plain text to a TLS port never gets through.
    with fairway.Client(server.address, token=key, timeout=5, retry=fairway.NO_RETRY) as client:
        with pytest.raises(fairway.FairwayError):
            client.describe_queue("secure")


def test_async_client_and_worker_over_tls(secure_server):
    server, pki, key = secure_server

    async def main() -> None:
        async with fairway.AsyncClient(server.address, ca_file=str(pki["ca"]), token=key) as client:
            await client.create_queue("secure.async")
            await client.add("secure.async", b"a")
            with pytest.raises(fairway.Unauthenticated):
                async with fairway.AsyncClient(server.address, ca_file=str(pki["ca"]), token="wrong") as bad:
                    await bad.describe_queue("secure.async")

    asyncio.run(main())
    done = threading.Event()
    worker = fairway.Worker(server.address, ca_file=str(pki["ca"]), token=key, concurrency=1, poll_wait=1)

    @worker.task("secure.async")
    def work(payload: bytes) -> None:
        done.set()

    thread = run_in_thread(worker)
    try:
        assert done.wait(30)
        with fairway.Client(server.address, ca_file=str(pki["ca"]), token=key) as client:
            wait_until(lambda: client.describe_queue("secure.async").completed == 1, 30, "the completion")
    finally:
        stop_and_join(worker, thread)
