package io.geosync.plugin.common;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertTrue;

import io.geosync.plugin.common.PluginAccess.Decision;
import java.util.Set;
import org.junit.jupiter.api.Test;
import org.junit.jupiter.params.ParameterizedTest;
import org.junit.jupiter.params.provider.CsvSource;

class PluginAccessTest {
    @ParameterizedTest(name = "write={0} loopback={1} remoteReads={2} -> {3}")
    @CsvSource({
        "false, true,  false, 200",
        "true,  true,  false, 200",
        "false, false, false, 403",
        "false, false, true,  200",
        "true,  false, false, 403",
        // The remote-reads switch never opens writes to the network.
        "true,  false, true,  403",
    })
    void theNetworkRule(boolean write, boolean loopback, boolean remoteReads, int status) {
        assertEquals(status, PluginAccess.network(write, loopback, remoteReads).status());
    }

    @Test
    void rolesNeedAuthenticationAndAGeoSyncRoleOrSuperuser() {
        Set<String> superUsers = Set.of("admin");
        Set<String> geosync = Set.of("geosync-agent");
        Decision none = PluginAccess.role(null, superUsers, geosync);
        assertEquals(401, none.status());
        assertTrue(none.error().contains("Authorization"));
        assertTrue(PluginAccess.role("admin", superUsers, geosync).allowed());
        assertTrue(PluginAccess.role("geosync-agent", superUsers, geosync).allowed());
        Decision app = PluginAccess.role("app", superUsers, geosync);
        assertEquals(403, app.status());
        assertTrue(app.error().contains(PluginAccess.ADMIN_ROLES_KEY));
        assertEquals(403, PluginAccess.role("", superUsers, Set.of()).status());
    }

    @Test
    void roleListsAreCommaSeparated() {
        assertEquals(Set.of("a", "b c"), PluginAccess.roles(" a, ,b c,"));
        assertEquals(Set.of(), PluginAccess.roles(null));
        assertEquals(Set.of(), PluginAccess.roles(""));
    }
}
