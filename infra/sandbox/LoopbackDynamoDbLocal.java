import java.lang.reflect.Field;
import org.eclipse.jetty.server.Connector;
import org.eclipse.jetty.server.Server;
import org.eclipse.jetty.server.ServerConnector;
import software.amazon.dynamodb.services.local.main.ServerRunner;
import software.amazon.dynamodb.services.local.server.DynamoDBProxyServer;

/**
 * Starts DynamoDB Local listening on 127.0.0.1 only (infra/sandbox/emulators.ts compiles this
 * file once and runs its class, the jar on the class path, in place of `java -jar`).
 *
 * DynamoDB Local accepts any signature, so whoever reaches its port reads and writes every
 * tenant's data; its own main (`java -jar`) has no host option and builds Jetty with
 * `new Server(port)`, which listens on every interface. This takes the same arguments, builds the
 * same server through ServerRunner, and sets its connector's host before it starts. If a release
 * renames what this reaches, it stops with an exception rather than listening on every interface.
 */
public final class LoopbackDynamoDbLocal {
  public static void main(String[] args) throws Exception {
    DynamoDBProxyServer proxy = ServerRunner.createServerFromCommandLineArgs(args);
    Field field = DynamoDBProxyServer.class.getDeclaredField("server");
    field.setAccessible(true);
    Server server = (Server) field.get(proxy);
    Connector[] connectors = server.getConnectors();
    if (connectors.length == 0) throw new IllegalStateException("DynamoDB Local has no connector");
    for (Connector connector : connectors) {
      if (!(connector instanceof ServerConnector network)) {
        throw new IllegalStateException("unexpected DynamoDB Local connector " + connector);
      }
      network.setHost("127.0.0.1");
    }
    // DynamoDBProxyServer.start prints "Could not start server on port N: Address already in use"
    // and stops, as `java -jar` does; emulators.ts reads that to pick another port.
    proxy.start();
  }
}
