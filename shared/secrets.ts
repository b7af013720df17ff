import { ENV } from "./config.js";

type Env = Readonly<Record<string, string | undefined>>;

/**
 * The HMAC secret webhooks are signed with: from Secrets Manager on AWS
 * (WEBHOOK_SECRET_ARN, read once per cold start), or WEBHOOK_SECRET locally.
 */
export async function loadWebhookSecret(env: Env): Promise<string> {
  const arn = env[ENV.webhookSecretArn];
  if (arn) {
    const { SecretsManagerClient, GetSecretValueCommand } = await import(
      "@aws-sdk/client-secrets-manager"
    );
    const result = await new SecretsManagerClient({}).send(
      new GetSecretValueCommand({ SecretId: arn }),
    );
    if (!result.SecretString) throw new Error(`secret ${arn} has no string value`);
    return result.SecretString;
  }
  const secret = env[ENV.webhookSecret];
  if (!secret)
    throw new Error(`set ${ENV.webhookSecretArn} or ${ENV.webhookSecret} to sign webhooks`);
  return secret;
}
