package io.geosync.plugin.common;

import java.util.Arrays;
import java.util.Set;
import java.util.stream.Collectors;

/**
 * Who may call the plugin's {@code /admin/v2/geosync/*} endpoints: the rules alone, without the broker (the
 * interceptor supplies the caller's address and, where the broker authenticates, the role its
 * authentication service gave the request).
 *
 * <ul>
 *   <li>Cursor writes ({@code POST acks}) are served to loopback clients only, always: the agent is a sidecar
 *       of the broker. {@code geosyncOriginIndexAllowRemoteReads} opens the reads (origins, cursors, status)
 *       to the network and never the writes.</li>
 *   <li>Where the broker has {@code authenticationEnabled}, every call must carry credentials the broker
 *       accepts (else 401), and its role must be a superuser or one of {@code geosyncAdminRoles} (else 403),
 *       reads included: the feed and the index name topics, subscriptions and their cursors. Being on
 *       loopback proves nothing then (any container of the broker's pod is on it).</li>
 * </ul>
 */
public final class PluginAccess {
    /** The configuration key listing the roles (comma-separated) allowed besides the superusers. */
    public static final String ADMIN_ROLES_KEY = "geosyncAdminRoles";

    private PluginAccess() {
    }

    /** The verdict: {@link #OK}, or the HTTP status and the message that says what to do. */
    public record Decision(int status, String error) {
        public boolean allowed() {
            return status == 200;
        }
    }

    public static final Decision OK = new Decision(200, "");

    /** Whether the caller's address may make this call ({@code write}: a cursor write). */
    public static Decision network(boolean write, boolean loopback, boolean allowRemoteReads) {
        if (loopback) {
            return OK;
        }
        if (write) {
            return new Decision(403, "GeoSync cursor writes are served to loopback clients only (run the agent "
                    + "as the broker's sidecar); geosyncOriginIndexAllowRemoteReads opens reads only");
        }
        return allowRemoteReads ? OK : new Decision(403, "the GeoSync endpoints are served to loopback clients "
                + "only (geosyncOriginIndexAllowRemoteReads=true opens the reads)");
    }

    /**
     * Whether an authenticated caller's {@code role} (null: the broker's authentication refused the request)
     * may call the endpoints; only asked where the broker authenticates.
     */
    public static Decision role(String role, Set<String> superUsers, Set<String> adminRoles) {
        if (role == null) {
            return new Decision(401, "authentication required: send the broker's credentials (e.g. Authorization: "
                    + "Bearer <token>)");
        }
        if (superUsers.contains(role) || adminRoles.contains(role)) {
            return OK;
        }
        return new Decision(403, "role '" + role + "' may not use the GeoSync endpoints: make it a superuser or "
                + "list it in " + ADMIN_ROLES_KEY);
    }

    /** The roles of a comma-separated list, blanks dropped. */
    public static Set<String> roles(String csv) {
        if (csv == null) {
            return Set.of();
        }
        return Arrays.stream(csv.split(",")).map(String::trim).filter(s -> !s.isEmpty())
                .collect(Collectors.toUnmodifiableSet());
    }
}
