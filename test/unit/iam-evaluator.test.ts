import { describe, expect, it } from "vitest";
import { authorizationsOf, type ResourceArns } from "../infra/support/aws-calls.js";
import { allows, type Bindings, type Grant, resolveValue } from "../infra/support/iam-evaluator.js";

/** The pieces of the IAM conformance test that its live run does not reach: wildcards, intrinsics. */
const TABLE = "arn:aws:dynamodb:eu-west-1:111122223333:table/Runs";
const bindings: Bindings = {
  partition: "aws",
  region: "eu-west-1",
  account: "111122223333",
  resources: new Map([
    ["RunsTable", { ref: "Runs", attributes: { Arn: TABLE } }],
    ["WorkQueue", { ref: "https://queue/work", attributes: { Arn: "arn:aws:sqs:q:work" } }],
  ]),
};
/** CloudFormation's `${Name}` placeholders, written without a JavaScript template's look-alike. */
const sub = (text: string) => text.replaceAll("{", "$" + "{");
const grant = (actions: string[], resources: string[]): Grant => ({
  policy: "p",
  actions,
  resources,
});

describe("resolveValue", () => {
  it("binds Ref and Fn::GetAtt, and joins and substitutes pseudo parameters", () => {
    expect(resolveValue({ Ref: "RunsTable" }, bindings)).toBe("Runs");
    expect(
      resolveValue(
        { "Fn::Join": ["", [{ "Fn::GetAtt": ["RunsTable", "Arn"] }, "/index/*"]] },
        bindings,
      ),
    ).toBe(`${TABLE}/index/*`);
    expect(
      resolveValue(
        {
          "Fn::Sub": sub("arn:{AWS::Partition}:logs:{AWS::Region}:{AWS::AccountId}:x/{RunsTable}"),
        },
        bindings,
      ),
    ).toBe("arn:aws:logs:eu-west-1:111122223333:x/Runs");
  });

  it("leaves what is not bound as a marker no ARN equals", () => {
    expect(resolveValue({ "Fn::GetAtt": ["Other", "Arn"] }, bindings)).toBe(
      "<unbound GetAtt Other.Arn>",
    );
    expect(resolveValue({ Ref: "Other" }, bindings)).toBe("<unbound Ref Other>");
  });

  it("takes Fn::If's branch by its condition, evaluated against the bindings", () => {
    const conditions = {
      InChina: { "Fn::Equals": [{ Ref: "AWS::Partition" }, "aws-cn"] },
      Elsewhere: { "Fn::Not": [{ Condition: "InChina" }] },
      Either: { "Fn::Or": [{ Condition: "InChina" }, { Condition: "Elsewhere" }] },
      Both: { "Fn::And": [{ Condition: "InChina" }, { Condition: "Elsewhere" }] },
    };
    const china: Bindings = { ...bindings, partition: "aws-cn", conditions };
    const commercial: Bindings = { ...bindings, conditions };
    const branch = (condition: string) => ({ "Fn::If": [condition, "then", "else"] });
    expect(resolveValue(branch("InChina"), china)).toBe("then");
    expect(resolveValue(branch("InChina"), commercial)).toBe("else");
    expect(resolveValue(branch("Elsewhere"), commercial)).toBe("then");
    expect(resolveValue(branch("Either"), china)).toBe("then");
    expect(resolveValue(branch("Both"), china)).toBe("else");
    expect(resolveValue({ Ref: "AWS::URLSuffix" }, china)).toBe("amazonaws.com.cn");
    expect(() => resolveValue(branch("Unknown"), china)).toThrow("no condition Unknown");
  });
});

describe("allows", () => {
  it("matches action wildcards, case-insensitively", () => {
    const getStar = grant(["dynamodb:Get*"], [TABLE]);
    expect(allows(getStar, "dynamodb:GetItem", TABLE)).toBe(true);
    expect(allows(getStar, "DynamoDB:getitem", TABLE)).toBe(true);
    expect(allows(getStar, "dynamodb:BatchGetItem", TABLE)).toBe(false);
    expect(allows(grant(["dynamodb:?etItem"], [TABLE]), "dynamodb:GetItem", TABLE)).toBe(true);
    expect(allows(grant(["*"], [TABLE]), "sqs:SendMessage", TABLE)).toBe(true);
  });

  it("keeps a table's grant off its indexes, and an index wildcard off the table", () => {
    expect(allows(grant(["dynamodb:Query"], [TABLE]), "dynamodb:Query", `${TABLE}/index/x`)).toBe(
      false,
    );
    const indexes = grant(["dynamodb:Query"], [`${TABLE}/index/*`]);
    expect(allows(indexes, "dynamodb:Query", `${TABLE}/index/inflight`)).toBe(true);
    expect(allows(indexes, "dynamodb:Query", TABLE)).toBe(false);
    expect(allows(grant(["dynamodb:Query"], [`${TABLE}*`]), "dynamodb:Query", `${TABLE}2`)).toBe(
      true,
    );
  });

  it("never counts a grant with a condition: the call is reported, not let through", () => {
    const key = "arn:aws:kms:eu-west-1:111122223333:key/k";
    const conditional: Grant = {
      ...grant(["kms:Decrypt"], [key]),
      condition: { StringEquals: { "kms:ViaService": "dynamodb.eu-west-1.amazonaws.com" } },
    };
    expect(allows(conditional, "kms:Decrypt", key)).toBe(false);
    expect(allows(grant(["kms:Decrypt"], [key]), "kms:Decrypt", key)).toBe(true);
  });

  it("compares resources case-sensitively and treats regex characters literally", () => {
    expect(
      allows(grant(["s3:GetObject"], ["arn:aws:s3:::b/a.b"]), "s3:GetObject", "arn:aws:s3:::b/aXb"),
    ).toBe(false);
    expect(
      allows(grant(["dynamodb:GetItem"], [TABLE]), "dynamodb:GetItem", TABLE.toLowerCase()),
    ).toBe(false);
  });
});

describe("authorizationsOf", () => {
  const arns: ResourceArns = {
    table: (name) => `table:${name}`,
    queue: (url) => `queue:${url}`,
    lambdaFunction: (name) => `fn:${name}`,
  };

  it("authorizes a transaction item by item, as the single-item actions", () => {
    expect(
      authorizationsOf(
        "dynamodb",
        "TransactWriteItems",
        {
          TransactItems: [
            { ConditionCheck: { TableName: "Jobs" } },
            { Delete: { TableName: "Jobs" } },
            { Update: { TableName: "Jobs" } },
            { Put: { TableName: "Runs" } },
          ],
        },
        arns,
      ),
    ).toEqual([
      { action: "dynamodb:ConditionCheckItem", resource: "table:Jobs" },
      { action: "dynamodb:DeleteItem", resource: "table:Jobs" },
      { action: "dynamodb:UpdateItem", resource: "table:Jobs" },
      { action: "dynamodb:PutItem", resource: "table:Runs" },
    ]);
  });

  it("names the index a query reads, every table of a batch, and a batch send as SendMessage", () => {
    expect(
      authorizationsOf("dynamodb", "Query", { TableName: "Runs", IndexName: "inflight" }, arns),
    ).toEqual([{ action: "dynamodb:Query", resource: "table:Runs/index/inflight" }]);
    expect(
      authorizationsOf("dynamodb", "BatchGetItem", { RequestItems: { Jobs: {}, Runs: {} } }, arns),
    ).toEqual([
      { action: "dynamodb:BatchGetItem", resource: "table:Jobs" },
      { action: "dynamodb:BatchGetItem", resource: "table:Runs" },
    ]);
    expect(authorizationsOf("sqs", "SendMessageBatch", { QueueUrl: "u" }, arns)).toEqual([
      { action: "sqs:SendMessage", resource: "queue:u" },
    ]);
    expect(
      authorizationsOf("lambda", "Invoke", { FunctionName: "d", Qualifier: "live" }, arns),
    ).toEqual([{ action: "lambda:InvokeFunction", resource: "fn:d:live" }]);
  });

  it("reports a call it does not know how IAM authorizes, rather than guessing", () => {
    expect(authorizationsOf("dynamodb", "ExecuteStatement", {}, arns)).toEqual([
      { action: "dynamodb:ExecuteStatement", resource: null },
    ]);
    expect(authorizationsOf("s3", "GetObject", { Bucket: "b" }, arns)).toEqual([
      { action: "s3:GetObject", resource: null },
    ]);
  });
});
