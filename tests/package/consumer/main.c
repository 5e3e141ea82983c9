/* The C API from the installed smb.h alone. */
#include <smb/config.h>
#include <smb/smb.h>

#include <stdio.h>

int main(void) {
  smb_client* client = NULL;
  int rc = smb_client_connect("127.0.0.1:1", 2000, &client);
  printf("libsmb %s (C): %s: %s\n", SMB_VERSION_STRING, smb_errc_name(rc), smb_last_error());
  smb_client_free(client);
  return rc == SMB_EUNREACHABLE ? 0 : 1;
}
