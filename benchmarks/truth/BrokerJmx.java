import java.util.Set;

import javax.management.MBeanServerConnection;
import javax.management.ObjectName;
import javax.management.remote.JMXConnector;
import javax.management.remote.JMXConnectorFactory;
import javax.management.remote.JMXServiceURL;

import com.sun.tools.attach.VirtualMachine;

/**
 * The broker's own count of the connections it accepted, for kmon's ground-truth harness:
 * attached to a broker JVM by PID (the JDK's attach API and its local management agent),
 * prints one line per client listener, {@code LISTENER TOTAL}: the sum over its network
 * processors of {@code kafka.server:type=socket-server-metrics} {@code connection-creation-total}.
 *
 * <p>Usage: {@code java BrokerJmx PID LISTENER...}
 */
public final class BrokerJmx {
    private BrokerJmx() {
    }

    public static void main(String[] args) throws Exception {
        VirtualMachine vm = VirtualMachine.attach(args[0]);
        String address;
        try {
            address = vm.startLocalManagementAgent();
        } finally {
            vm.detach();
        }
        try (JMXConnector connector = JMXConnectorFactory.connect(new JMXServiceURL(address))) {
            MBeanServerConnection server = connector.getMBeanServerConnection();
            for (int i = 1; i < args.length; i++) {
                ObjectName pattern = new ObjectName("kafka.server:type=socket-server-metrics,listener="
                        + args[i] + ",networkProcessor=*");
                Set<ObjectName> names = server.queryNames(pattern, null);
                double total = 0;
                for (ObjectName name : names) {
                    total += ((Number) server.getAttribute(name, "connection-creation-total")).doubleValue();
                }
                System.out.println(args[i] + " " + (long) total);
            }
        }
    }
}
