import { checkServerIdentity, type PeerCertificate } from "node:tls";

/**
 * A self-signed certificate for localhost and 127.0.0.1 (until 2126), made for the tests alone:
 * a TLS receiver a test's client trusts by naming it as `ca`, and a deployed worker does not.
 */
export const TEST_TLS_KEY = `-----BEGIN PRIVATE KEY-----
MIGHAgEAMBMGByqGSM49AgEGCCqGSM49AwEHBG0wawIBAQQgeNkVEGMxf1kjwM49
sOJTmFnZpe8dzAJMB4yKucQqOXehRANCAAQuPFfmmMxd9ilYMaJ8JaIoBFgwApgp
WQQ/SNv6Bp1PKB2fiRf7cyAM/ZwzvISXsyvrB9LemLi8ICXI+RkgsDGB
-----END PRIVATE KEY-----`;

export const TEST_TLS_CERT = `-----BEGIN CERTIFICATE-----
MIIBmjCCAUGgAwIBAgIUBsaAr4ytVtdCL5h4bKbJKyKcDeMwCgYIKoZIzj0EAwIw
FDESMBAGA1UEAwwJbG9jYWxob3N0MCAXDTI2MTIwNDEwNTAzOVoYDzIxMjYxMTEw
MTA1MDM5WjAUMRIwEAYDVQQDDAlsb2NhbGhvc3QwWTATBgcqhkjOPQIBBggqhkjO
PQMBBwNCAAQuPFfmmMxd9ilYMaJ8JaIoBFgwApgpWQQ/SNv6Bp1PKB2fiRf7cyAM
/ZwzvISXsyvrB9LemLi8ICXI+RkgsDGBo28wbTAdBgNVHQ4EFgQULKZAICL0jrgA
djmOa3IglzCDQuQwHwYDVR0jBBgwFoAULKZAICL0jrgAdjmOa3IglzCDQuQwDwYD
VR0TAQH/BAUwAwEB/zAaBgNVHREEEzARgglsb2NhbGhvc3SHBH8AAAEwCgYIKoZI
zj0EAwIDRwAwRAIgWqrSCpyCIfP5ZwVpfUvkjVUdhbYSXSgMXSfBWyyT3nYCIGU8
TsI5yG8mDRbWmPhWXuwj6VbjEi36w5bpZpLXB0Hy
-----END CERTIFICATE-----`;

/**
 * Node's own error (checkServerIdentity's) for a certificate the client trusts that does not cover
 * `host`, with `subjectaltname` as Node writes it (`DNS:a.example, IP Address:203.0.113.7`): a
 * fault only a publicly trusted certificate brings, which no receiver here can have.
 */
export function nameMismatch(host: string, subjectaltname: string): Error {
  const cert = {
    subject: { CN: "internal.example" },
    subjectaltname,
  } as unknown as PeerCertificate;
  const error = checkServerIdentity(host, cert);
  if (error === undefined) throw new Error(`${subjectaltname} covers ${host}`);
  return error;
}
