import type { AttributeValue } from "@aws-sdk/client-dynamodb";
import { unmarshall } from "@aws-sdk/util-dynamodb";

/**
 * DynamoDB reports a failed condition as an exception; these turn the two
 * shapes it takes into plain answers so callers branch on meaning.
 */
export function isConditionalCheckFailed(error: unknown): boolean {
  return error instanceof Error && error.name === "ConditionalCheckFailedException";
}

/**
 * For a cancelled transaction, the reason code of each item in request order
 * ("None" where that item was fine); null when the error is something else.
 */
export function transactionCancellationCodes(error: unknown): string[] | null {
  if (!(error instanceof Error) || error.name !== "TransactionCanceledException") return null;
  const reasons = (error as { CancellationReasons?: { Code?: string }[] }).CancellationReasons;
  return (reasons ?? []).map((reason) => reason.Code ?? "None");
}

/**
 * The item of `error`'s failed condition, when the request asked for it
 * (ReturnValuesOnConditionCheckFailure: ALL_OLD). The Document client does not
 * unmarshall items carried by errors, so it is done here.
 */
export function failedConditionItem(error: unknown): Record<string, unknown> | null {
  const item = (error as { Item?: Record<string, AttributeValue> } | null)?.Item;
  return item ? unmarshall(item) : null;
}
