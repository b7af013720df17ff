/**
 * A value for each node of a graph of jobs from its children's values, depth first and memoized,
 * as a recursion would compute it, but on a stack of its own on the heap: a chain of `after` links
 * built before edits bounded the depth below a job may be as deep as the tenant has jobs, and a
 * recursion thousands of frames deep overflows the call stack (a 500). Same order, same results:
 * the children in the order given, each finished before the next is begun, a node met again on
 * the chain being folded (a cycle, which edits refuse) or no node at all (`children` undefined)
 * adding `none` and not remembered.
 */
export interface DepthFirstFold<A, V> {
  /** The node's children in order, or undefined when it is no node (not read, not counted). */
  readonly children: (id: string) => readonly string[] | undefined;
  /** A node's accumulator before its first child. */
  readonly start: (id: string) => A;
  /** Adds a child's value to its parent's accumulator. */
  readonly add: (into: A, child: string, value: V) => void;
  /** The node's value once all its children are added. */
  readonly end: (from: A) => V;
  /** The value of a node that is none, or on the chain being folded. */
  readonly none: () => V;
}

interface Frame<A> {
  readonly id: string;
  readonly children: readonly string[];
  next: number;
  readonly into: A;
}

/** The memoized fold: each node's value, folded once per node (per call, for those left out). */
export function depthFirstFold<A, V>(fold: DepthFirstFold<A, V>): (id: string) => V {
  const done = new Map<string, V>();
  const onChain = new Set<string>();
  /** The frame to fold a node in, or its value when it has none to fold (known, none, on chain). */
  const begin = (id: string): Frame<A> | { readonly value: V } => {
    const known = done.get(id);
    if (known !== undefined) return { value: known };
    const children = onChain.has(id) ? undefined : fold.children(id);
    if (children === undefined) return { value: fold.none() };
    onChain.add(id);
    return { id, children, next: 0, into: fold.start(id) };
  };
  return (root) => {
    const first = begin(root);
    if ("value" in first) return first.value;
    const stack: Frame<A>[] = [first];
    let value = fold.none();
    for (let frame = stack.at(-1); frame !== undefined; frame = stack.at(-1)) {
      const child = frame.children[frame.next];
      if (child !== undefined) {
        const begun = begin(child);
        if ("value" in begun) {
          fold.add(frame.into, child, begun.value);
          frame.next++;
        } else stack.push(begun);
        continue;
      }
      stack.pop();
      onChain.delete(frame.id);
      value = fold.end(frame.into);
      done.set(frame.id, value);
      const parent = stack.at(-1);
      if (parent !== undefined) {
        fold.add(parent.into, frame.id, value);
        parent.next++;
      }
    }
    // The root's, ended last.
    return value;
  };
}
