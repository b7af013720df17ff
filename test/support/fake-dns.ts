import { createSocket } from "node:dgram";
import { isIP } from "node:net";

/**
 * A DNS server on 127.0.0.1 (UDP) for resolvers under test: it answers the names in `records`
 * with their A and AAAA records (NOERROR without answers for a family a name lacks), swallows
 * every query for a name in `blackHoled` (as an authoritative server that never answers), and
 * answers NXDOMAIN for anything else. `queries` counts what it received, by name.
 */
export interface FakeDns {
  /** `127.0.0.1:<port>`, as `Resolver.setServers` takes it. */
  readonly server: string;
  readonly queries: Map<string, number>;
  close(): Promise<void>;
}

const TYPE_A = 1;
const TYPE_AAAA = 28;

export async function fakeDns(
  records: Readonly<Record<string, readonly string[]>>,
  blackHoled: readonly string[],
): Promise<FakeDns> {
  const socket = createSocket("udp4");
  const queries = new Map<string, number>();
  socket.on("message", (query, from) => {
    const question = readQuestion(query);
    if (question === null) return;
    const { name, type, end } = question;
    queries.set(name, (queries.get(name) ?? 0) + 1);
    if (blackHoled.includes(name)) return;
    const addresses = records[name];
    const answers = (addresses ?? [])
      .filter((address) => isIP(address) === (type === TYPE_A ? 4 : type === TYPE_AAAA ? 6 : 0))
      .map((address) => answerRecord(type, address));
    const header = Buffer.alloc(12);
    query.copy(header, 0, 0, 2);
    // QR, RD, RA; rcode NXDOMAIN (3) for a name the server does not know.
    header.writeUInt16BE(0x8180 | (addresses === undefined ? 3 : 0), 2);
    header.writeUInt16BE(1, 4);
    header.writeUInt16BE(answers.length, 6);
    socket.send(
      Buffer.concat([header, query.subarray(12, end), ...answers]),
      from.port,
      from.address,
    );
  });
  await new Promise<void>((resolve) => socket.bind(0, "127.0.0.1", resolve));
  return {
    server: `127.0.0.1:${socket.address().port}`,
    queries,
    close: () => new Promise<void>((resolve) => socket.close(resolve)),
  };
}

/** The first question's name (lower case), type and where it ends, or null when unreadable. */
function readQuestion(query: Buffer): { name: string; type: number; end: number } | null {
  const labels: string[] = [];
  let offset = 12;
  while (offset < query.length) {
    const length = query[offset] ?? 0;
    if (length === 0) break;
    labels.push(query.subarray(offset + 1, offset + 1 + length).toString("latin1"));
    offset += length + 1;
  }
  offset += 1;
  if (offset + 4 > query.length) return null;
  return {
    name: labels.join(".").toLowerCase(),
    type: query.readUInt16BE(offset),
    end: offset + 4,
  };
}

/** One answer: the question's name (a pointer to offset 12), class IN, TTL 60 s. */
function answerRecord(type: number, address: string): Buffer {
  const data = type === TYPE_A ? ipv4Bytes(address) : ipv6Bytes(address);
  const fixed = Buffer.alloc(12);
  fixed.writeUInt16BE(0xc00c, 0);
  fixed.writeUInt16BE(type, 2);
  fixed.writeUInt16BE(1, 4);
  fixed.writeUInt32BE(60, 6);
  fixed.writeUInt16BE(data.length, 10);
  return Buffer.concat([fixed, data]);
}

function ipv4Bytes(address: string): Buffer {
  return Buffer.from(address.split(".").map(Number));
}

/** A full or `::`-compressed IPv6 address (no embedded IPv4) as 16 bytes. */
function ipv6Bytes(address: string): Buffer {
  const [head = "", tail] = address.split("::");
  const left = head === "" ? [] : head.split(":");
  const right = tail === undefined || tail === "" ? [] : tail.split(":");
  const groups = [...left, ...Array<string>(8 - left.length - right.length).fill("0"), ...right];
  const bytes = Buffer.alloc(16);
  groups.forEach((group, i) => {
    bytes.writeUInt16BE(Number.parseInt(group, 16), i * 2);
  });
  return bytes;
}
