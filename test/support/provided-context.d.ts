// Types what test/support/global-setup.ts provides, so inject() is checked.
export {};

declare module "vitest" {
  export interface ProvidedContext {
    /** DynamoDB endpoint every test file shares (DynamoDB Local, or AWS_ENDPOINT_URL[_DYNAMODB]). */
    dynamoEndpoint: string;
    /** SQS endpoint every test file shares (fauxqs, or AWS_ENDPOINT_URL[_SQS]). */
    sqsEndpoint: string;
    /** "emulators" when the setup started DynamoDB Local and fauxqs itself. */
    awsTarget: "emulators" | "environment";
  }
}
