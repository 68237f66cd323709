package avisim

import (
	"bytes"
	"encoding/json"
	"net/http"
	"strings"

	"github.com/vmware/alb-sdk/go/models"
)

// schemas are the alb-sdk models of the object types clients write: a body
// with a field the model does not have, or a value of the wrong JSON type,
// is refused as the controller refuses it, so that a client cannot rely on
// a field the pinned API version does not know.
var schemas = map[string]func() any{
	"pool":                 func() any { return &models.Pool{} },
	"poolgroup":            func() any { return &models.PoolGroup{} },
	"virtualservice":       func() any { return &models.VirtualService{} },
	"vsvip":                func() any { return &models.VsVip{} },
	"l4policyset":          func() any { return &models.L4PolicySet{} },
	"httppolicyset":        func() any { return &models.HTTPPolicySet{} },
	"sslkeyandcertificate": func() any { return &models.SSLKeyAndCertificate{} },
}

// checkSchema refuses obj when it does not decode strictly into the model
// of typ.
func checkSchema(typ string, obj object) *apiError {
	schema, ok := schemas[typ]
	if !ok {
		return nil
	}
	raw, err := json.Marshal(obj)
	if err != nil {
		return errorf(http.StatusBadRequest, "invalid object: %v", err)
	}
	dec := json.NewDecoder(bytes.NewReader(raw))
	dec.DisallowUnknownFields()
	if err := dec.Decode(schema()); err != nil {
		return errorf(http.StatusBadRequest, "%s: %s", kinds[typ].display, strings.TrimPrefix(err.Error(), "json: "))
	}
	return nil
}
